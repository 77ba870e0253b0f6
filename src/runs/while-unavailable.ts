import pRetry from 'p-retry'
import { RunStoreUnavailableError } from '../errors.ts'

/**
 * A run-store write retried while the store cannot be reached (about two minutes; never keeping a
 * stopping process alive); any other failure at once. The first try goes out directly: nearly
 * every write needs no other, and p-retry's setup per call costs more CPU than the write's own
 * client code. One that failed for the store goes on with p-retry, whose first "attempt" is that
 * failure: delays and limits as they would be.
 */
export async function whileUnavailable<T> (write: () => Promise<T>): Promise<T> {
  try {
    return await write()
  } catch (first) {
    if (!(first instanceof RunStoreUnavailableError)) throw first
    return await pRetry(async attempt => {
      if (attempt === 1) throw first
      return await write()
    }, {
      retries: 120,
      minTimeout: 250,
      maxTimeout: 1000,
      factor: 2,
      unref: true, // a stopping process does not wait for them
      shouldRetry: ({ error }) => error instanceof RunStoreUnavailableError
    })
  }
}
