import { randomBytes } from 'node:crypto'
import type { RunScope } from '../../run-data.ts'
import type { RedisContext } from './redis-context.ts'

/** Longest wait for every sidecar's reply to a call cancel: a replica that answers later (paused) is taken not to hold the call. */
const REPLY_WAIT_MS = 500

/** An ask on the app's cancel channel starts with this; a run's cancel notice is a bare run id (which never holds it). */
const ASK = '?'
/** An ask for one caller's call only (RUN_ACCESS=caller) ends with this and the caller, URI-encoded (a `sub` may hold spaces). */
const BY = '='

/** One cancel asked of the other sidecars, waiting for their replies. */
interface Asked {
  /** Sidecars that heard the ask (PUBLISH's count), once known. */
  heard: number | undefined
  replies: number
  settle: (found: boolean) => void
}

/**
 * Cancels of in-flight calls across the sidecars sharing a Redis store: an ask on the app's cancel
 * channel (`?<ask id> <run id> <reply channel>[ =<caller>]`), heard by every sidecar of the app (the asker
 * included); each replies on the asker's own channel `<ask id> 1` (it held the call and canceled
 * it) or `<ask id> 0`. PUBLISH's count of receivers says how many replies to wait for: the answer
 * is known as soon as one says 1 or all said 0 (or REPLY_WAIT_MS passed).
 */
export class RedisCallCancels {
  readonly #ctx: RedisContext
  /** Where this sidecar hears replies: in the app's slot (its hash tag), as every channel of the app. */
  readonly #replies: string
  readonly #asked = new Map<string, Asked>()

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
    this.#replies = `${ctx.own.cancel}:reply:${randomBytes(8).toString('hex')}`
    ctx.follow.onMessage(this.#replies, message => { this.#reply(message) })
  }

  /** A message on the app's cancel channel: an ask is answered here (true); anything else is a run's cancel notice (false). */
  heard (scope: RunScope, message: string): boolean {
    if (!message.startsWith(ASK)) return false
    const [askId, runId, replyTo, by] = message.slice(ASK.length).split(' ')
    if (askId === undefined || runId === undefined || replyTo === undefined) return true
    const caller = by?.startsWith(BY) === true ? callerOf(by.slice(BY.length)) : undefined
    // an ask for a caller whose name does not decode is nobody's: nothing is canceled
    const found = caller !== null && this.#ctx.listener?.cancelCall?.(scope, runId, caller) === true
    this.#ctx.publishOn(replyTo, `${askId} ${found ? 1 : 0}`).catch(() => {}) // unanswered: the asker stops waiting after REPLY_WAIT_MS
    return true
  }

  /** Asks every sidecar of the app to cancel its call with that run id (`caller` given: only that caller's): true when one did. */
  async cancel (runId: string, caller?: string): Promise<boolean> {
    const askId = randomBytes(8).toString('hex')
    const found = new Promise<boolean>(resolve => {
      const timer = setTimeout(() => { asked.settle(false) }, REPLY_WAIT_MS)
      const asked: Asked = {
        heard: undefined,
        replies: 0,
        settle: result => {
          clearTimeout(timer)
          this.#asked.delete(askId)
          resolve(result)
        }
      }
      this.#asked.set(askId, asked)
    })
    try {
      const by = caller === undefined ? '' : ` ${BY}${encodeURIComponent(caller)}`
      const heard = await this.#ctx.publishOn(this.#ctx.own.cancel, `${ASK}${askId} ${runId} ${this.#replies}${by}`)
      const asked = this.#asked.get(askId)
      if (asked !== undefined) {
        asked.heard = heard
        if (asked.replies >= heard) asked.settle(false)
      }
    } catch (error) {
      this.#asked.get(askId)?.settle(false)
      throw error
    }
    return await found
  }

  #reply (message: string): void {
    const space = message.indexOf(' ')
    const asked = this.#asked.get(message.slice(0, space))
    if (asked === undefined) return
    if (message.slice(space + 1) === '1') {
      asked.settle(true)
      return
    }
    asked.replies++
    if (asked.heard !== undefined && asked.replies >= asked.heard) asked.settle(false)
  }
}

/** A caller as an ask names it; null when it does not decode (never sent so). */
function callerOf (encoded: string): string | null {
  try {
    return decodeURIComponent(encoded)
  } catch {
    return null
  }
}
