import { setTimeout as delay } from 'node:timers/promises'

/**
 * Waits `ms`: for pacing (a load loop, a scripted app's pause) and for the few checks where only
 * time passing can show that something did not happen; anything else waits for its event.
 * `ref: false` does not keep the process alive (an app route that may outlive its test).
 */
export async function sleep (ms: number, options: { ref?: boolean } = {}): Promise<void> {
  await delay(ms, undefined, options)
}
