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
