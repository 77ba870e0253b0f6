/** setTimeout's longest delay (2^31 - 1 ms, about 24.8 days): a longer one would fire at once. */
export const LONGEST_TIMER_MS = 2 ** 31 - 1

/** A timer that can be cleared. */
export interface LongTimer { clear: () => void }

/** setTimeout for any delay (a year's `Cancel-After` too): a delay past the longest is reached in steps. Unref'd when asked. */
export function setLongTimeout (fire: () => void, ms: number, unref = false): LongTimer {
  const due = Date.now() + ms
  let timer: NodeJS.Timeout
  const arm = (left: number): void => {
    timer = left > LONGEST_TIMER_MS ? setTimeout(() => { arm(due - Date.now()) }, LONGEST_TIMER_MS) : setTimeout(fire, Math.max(0, left))
    if (unref) timer.unref()
  }
  arm(ms)
  return { clear: () => { clearTimeout(timer) } }
}
