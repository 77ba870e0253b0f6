import { setTimeout as delay } from 'node:timers/promises'

/**
 * How many times longer than asked the suite's waits hold out (eventually, waitForLine and the
 * receivers' waits): a ceiling bounds a failure and is never a measure, so a loaded machine (the
 * suite beside another, four files at a time) must not reach it where a quiet one passes in time.
 */
export const PATIENCE = 4

/** `ms` as a wait's ceiling: PATIENCE times as long. */
export const patient = (ms: number): number => ms * PATIENCE

/**
 * Waits `ms`: for pacing (a load loop, a scripted app's pause) and for the few checks where only
 * time passing can show that something did not happen; anything else waits for its event.
 * `ref: false` does not keep the process alive (an app route that may outlive its test).
 */
export async function sleep (ms: number, options: { ref?: boolean } = {}): Promise<void> {
  await delay(ms, undefined, options)
}

/**
 * Shows `watch` every setTimeout asked while `t` lasts: its delay, and the stack that asked for it
 * (made only when called). A timer `watch` answers 'hold' for is kept back: `held` runs them.
 * Restored at `t`'s teardown, or earlier by `restore`.
 */
export function watchTimers (t: { teardown: (fn: () => unknown) => void }, watch: (ms: number, stack: () => string) => 'hold' | undefined): { held: Array<() => void>, restore: () => void } {
  const held: Array<() => void> = []
  const setTimeoutAsGiven = globalThis.setTimeout
  globalThis.setTimeout = ((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    if (watch(ms ?? 0, () => new Error().stack ?? '') === 'hold') {
      held.push(() => { callback(...args) })
      return setTimeoutAsGiven(() => {}, 0)
    }
    return setTimeoutAsGiven(callback, ms, ...args)
  }) as typeof setTimeout
  const restore = (): void => { globalThis.setTimeout = setTimeoutAsGiven }
  t.teardown(restore)
  return { held, restore }
}
