import { RunStoreUnavailableError } from '../errors.ts'
import { retryAfterFirst } from '../shared/retry-after-first.ts'

/**
 * A run-store write retried while the store cannot be reached (about two minutes; never keeping a
 * stopping process alive); any other failure at once. The first try goes out directly (a hot path:
 * every durable webhook's end comes through here).
 */
export async function whileUnavailable<T> (write: () => Promise<T>): Promise<T> {
  return await retryAfterFirst(write, {
    retries: 120,
    minTimeout: 250,
    maxTimeout: 1000,
    factor: 2,
    unref: true, // a stopping process does not wait for them
    shouldRetry: ({ error }) => error instanceof RunStoreUnavailableError
  })
}
