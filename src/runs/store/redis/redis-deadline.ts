import { RunStoreUnavailableError } from '../../../errors.ts'

/** How often the answers awaited are checked against their deadlines: a late one fails at most this much after. */
const TICK_MS = 100

interface Awaited {
  readonly at: number
  readonly fail: (error: Error) => void
}

/** The answers awaited, in the order they were asked for (and so of their deadlines: every one gets the same time). */
const awaited = new Set<Awaited>()
let ticking: NodeJS.Timeout | undefined

function tick (): void {
  const now = performance.now()
  for (const answer of awaited) {
    if (answer.at > now) break
    awaited.delete(answer)
    answer.fail(new RunStoreUnavailableError('no answer in time'))
  }
  if (awaited.size === 0) {
    clearInterval(ticking)
    ticking = undefined
  }
}

/**
 * `pending`, or a RunStoreUnavailableError once `ms` have passed since it was asked for. ioredis's
 * own command timeout starts only as the command is written, and a command sent while the
 * connection is being made again waits for it first: under a stall, a request would get its 503
 * after both. One coarse timer serves every answer awaited.
 */
export async function answerWithin<T> (pending: Promise<T>, ms: number): Promise<T> {
  return await new Promise<T>((resolve, reject) => {
    const answer: Awaited = { at: performance.now() + ms, fail: reject }
    awaited.add(answer)
    ticking ??= setInterval(tick, TICK_MS).unref()
    pending.then(value => {
      awaited.delete(answer)
      resolve(value)
    }, (error: unknown) => {
      awaited.delete(answer)
      reject(error)
    })
  })
}
