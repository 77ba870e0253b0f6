import { arrayReply, bytesReply, codeReply, defineScript, integerReply, textReply, unexpectedReply } from './redis-named-script.ts'

// The queue's scripts (redis-queue.ts, redis-take.ts): submit, take by turn, start, give back;
// each in lua/<kebab-name>.lua, its KEYS, ARGV and replies in its header. The turn order's Lua is
// lua/turn.lua (by urgency, fair across callers), a run's start lua/started.lua.

/** The consumer group every sidecar holds an app's taken runs in (the reaper takes a lost sidecar's over); named `runners` in the Lua. */
export const GROUP = 'runners'

/** SUBMIT's replies: 1 queued; -1 the run id is taken; -2 ASYNC_QUEUE_DEPTH runs wait already; -3 ASYNC_QUEUE_MAX_BYTES would be passed. */
const SUBMITTED = { 1: 'queued', '-1': 'run id taken', '-2': 'queue full', '-3': 'bytes full' } as const

/** Records a queued run and queues it, in its turn (lua/submit.lua). */
export const SUBMIT = defineScript({
  name: 'SUBMIT',
  keys: ['run', 'queue', 'queuedBytes', 'dueSet', 'index', 'turns', 'fair', 'wake'],
  args: ['record', 'request', 'body', 'webhook', 'depth', 'runId', 'maxBytes', 'expiry', 'createdAtMs', 'urgency', 'caller', 'sub'],
  reply: reply => SUBMITTED[codeReply('SUBMIT', reply, [1, -1, -2, -3])]
})

/** A run taken: run id, entry, record as queued, urgency ('' none), caller; and, when TAKE started it, its start. */
export interface TakeReply {
  readonly runId: string
  readonly entry: string
  readonly queued: string
  readonly urgency: string
  readonly caller: string
  readonly started?: StartedTake
}

/**
 * What TAKE's start wrote and read: the record as started, the request (JSON), body and webhook
 * (null none); counting attempts, the number of the run's first event (its attempts before had theirs).
 */
export interface StartedTake {
  readonly record: string
  readonly request: Buffer | null
  readonly body: Buffer | null
  readonly webhook: Buffer | null
  readonly firstEvent?: number
}

/**
 * What TAKE answers: a run taken and started (`drained`: no turn left; `seen`: entries of the
 * version before looked at; `next`: the next turn's urgency, undefined none), none queued, only
 * capped callers' runs left (the urgency of the first), or turns passed over and none taken (ask again).
 */
export type TakeOutcome =
  | { readonly kind: 'taken', readonly run: TakeReply, readonly drained: boolean, readonly seen: number, readonly next: number | undefined }
  | { readonly kind: 'none', readonly seen: number }
  | { readonly kind: 'capped', readonly urgency: number }
  | { readonly kind: 'stale' }

function takeReply (reply: unknown): TakeOutcome {
  if (reply === 0) return { kind: 'stale' }
  const taken = arrayReply('TAKE', reply)
  if (taken.length === 1) return { kind: 'none', seen: integerReply('TAKE', taken[0]) }
  if (taken.length === 2 && taken[0] === -1) return { kind: 'capped', urgency: integerReply('TAKE', taken[1]) }
  if (taken.length !== 12 && taken.length !== 13) throw unexpectedReply('TAKE', reply)
  const [runId, entry, queued, urgency, caller, drained, seen, next, record, request, body, webhook, firstEvent] = taken
  if (typeof next !== 'number' && textReply('TAKE', next) !== '') throw unexpectedReply('TAKE', reply)
  const started: StartedTake = { record: textReply('TAKE', record), request: bytesReply('TAKE', request), body: bytesReply('TAKE', body), webhook: bytesReply('TAKE', webhook) }
  return {
    kind: 'taken',
    run: {
      runId: textReply('TAKE', runId),
      entry: textReply('TAKE', entry),
      queued: textReply('TAKE', queued),
      urgency: textReply('TAKE', urgency),
      caller: textReply('TAKE', caller),
      started: firstEvent === undefined ? started : { ...started, firstEvent: integerReply('TAKE', firstEvent) }
    },
    drained: codeReply('TAKE', drained, [1, 0]) === 1,
    seen: integerReply('TAKE', seen),
    next: typeof next === 'number' ? next : undefined
  }
}

/**
 * Takes the app's next queued run for a sidecar holding a free slot, and starts it (lua/take.lua);
 * its request, body and webhook as bytes. END_AND_TAKE runs its source after a run's end.
 */
export const TAKE = defineScript({
  name: 'TAKE',
  keys: ['turns', 'fair', 'wake', 'queue', 'queuedBytes', 'dueSet', 'index'],
  args: ['taker', 'runKeyPrefix', 'look', 'cappedCallers', 'startedAtMs', 'startedAtIso', 'woken', 'attempts'],
  reply: takeReply,
  buffers: true
})

/** A run taken over starts, its request, body and webhook read as bytes (lua/start-read.lua): undefined when its record had changed. */
export const START_READ = defineScript({
  name: 'START_READ',
  keys: ['run', 'queuedBytes', 'dueSet', 'index'],
  args: ['oldRecord', 'newRecord', 'owner', 'runId'],
  reply: reply => {
    const [started, request, body, webhook] = arrayReply('START_READ', reply)
    if (codeReply('START_READ', started, [1, 0]) === 0) return undefined
    return { request: bytesReply('START_READ', request), body: bytesReply('START_READ', body), webhook: bytesReply('START_READ', webhook) }
  },
  buffers: true
})

/** Gives a taken run back to the queue, in the turn it had (lua/release.lua): whether it was queued again. */
export const RELEASE = defineScript({
  name: 'RELEASE',
  keys: ['run', 'queue', 'turns', 'fair', 'wake', 'queuedBytes', 'dueSet', 'index'],
  args: ['entry', 'runId', 'recordAsStarted', 'recordAsQueued'],
  reply: reply => codeReply('RELEASE', reply, [1, 0]) === 1
})

/**
 * A run whose attempt was interrupted goes back to the queue for its next attempt, its retry event
 * appended (lua/retry.lua): that event's number, or undefined when its record had changed.
 */
export const RETRY = defineScript({
  name: 'RETRY',
  keys: ['run', 'queue', 'turns', 'fair', 'wake', 'queuedBytes', 'dueSet', 'index', 'events'],
  args: ['oldRecord', 'newRecord', 'entry', 'runId', 'ranMs', 'avoid', 'event', 'liveChannel'],
  reply: reply => {
    const n = integerReply('RETRY', reply)
    return n === -1 ? undefined : n
  }
})

/** The app's queued runs by urgency, 0 to 7 (lua/turns-by-urgency.lua). */
export const TURNS_BY_URGENCY = defineScript({
  name: 'TURNS_BY_URGENCY',
  keys: ['turns'],
  args: [],
  reply: reply => arrayReply('TURNS_BY_URGENCY', reply).map(count => integerReply('TURNS_BY_URGENCY', count))
})

/** The app's async runs taken and not ended: its queue's entries less its turns (lua/running.lua). */
export const RUNNING = defineScript({
  name: 'RUNNING',
  keys: ['queue', 'turns'],
  args: [],
  reply: reply => integerReply('RUNNING', reply)
})

/** Every script above: loaded as a connection becomes ready. */
export const QUEUE_SCRIPTS = [SUBMIT, TAKE, START_READ, RELEASE, RETRY, TURNS_BY_URGENCY, RUNNING].flatMap(script => script.scripts)
