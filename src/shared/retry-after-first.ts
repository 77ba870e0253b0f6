import pRetry, { type Options } from 'p-retry'

/**
 * `attempt` retried by p-retry, its first try made directly: nearly every call needs no other,
 * and p-retry's setup per call costs about as much CPU as a small attempt's own code. One that
 * failed goes on with p-retry, whose first "attempt" is that failure: delays, limits,
 * `shouldRetry`, `AbortError` and `signal` as they would be.
 */
export async function retryAfterFirst<T> (attempt: () => Promise<T>, options: Options): Promise<T> {
  try {
    return await attempt()
  } catch (first) {
    return await pRetry(async attemptNumber => {
      if (attemptNumber === 1) throw first
      return await attempt()
    }, options)
  }
}
