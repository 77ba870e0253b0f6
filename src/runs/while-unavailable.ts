import pRetry from 'p-retry'
import { RunStoreUnavailableError } from '../errors.ts'

/** A run-store write retried while the store cannot be reached (about two minutes; never keeping a stopping process alive); any other failure at once. */
export async function whileUnavailable<T> (write: () => Promise<T>): Promise<T> {
  return await pRetry(write, {
    retries: 120,
    minTimeout: 250,
    maxTimeout: 1000,
    factor: 2,
    unref: true, // a stopping process does not wait for them
    shouldRetry: ({ error }) => error instanceof RunStoreUnavailableError
  })
}
