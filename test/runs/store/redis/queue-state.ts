import type { Redis } from 'ioredis'
import type { RunRecord } from '../../../../src/runs/run-data.ts'
import { SUBMIT, TAKE, type TakeOutcome } from '../../../../src/runs/store/redis/redis-queue-scripts.ts'

// The key states the queue scripts' tests make by hand: app p/a's keys, and SUBMIT and TAKE
// called on them with the tests' defaults (a POST /work run created at 1 s, taken at 5 s by sidecar-a).

export const P = 'as:{p/a}'
/** The turns' score span of one urgency (turn.lua's TURN_SPAN). */
export const SPAN = 2 ** 40
export const K = {
  queue: `${P}:queue`, queuedBytes: `${P}:queued-bytes`, dueSet: `${P}:expiry`, index: `${P}:runs`, turns: `${P}:turns`, fair: `${P}:fair`, wake: `${P}:wake`
}
export const runKey = (id: string): string => `${P}:run:${id}`
export const CREATED = 1_000
export const STARTED_AT = 5_000
export const REQUEST = '{"method":"POST","path":"/work","headers":[],"hasBody":true}'

/** A turn's member: the submission's stream id zero-padded (15 + 8 digits), the run id, a space, the caller. */
export const memberOf = (entry: string, id: string, caller = ''): string => {
  const [ms = '', seq = ''] = entry.split('-')
  return `${ms.padStart(15, '0')}${seq.padStart(8, '0')}${id} ${caller}`
}

type SubmitFields = Parameters<typeof SUBMIT.call>[1]
type TakeFields = Parameters<typeof TAKE.call>[1]

/** SUBMIT and TAKE on `redis`: a run recorded as `queuedOf` makes it, `submitted` and `taking` on top of the defaults, each call's fields on top of those. */
export function queueCalls (redis: Redis, queuedOf: (id: string) => RunRecord, submitted: Partial<SubmitFields> = {}, taking: Partial<TakeFields> = {}): {
  submit: (id: string, fields?: Partial<SubmitFields>) => ReturnType<typeof SUBMIT.call>
  take: (fields?: Partial<TakeFields>) => Promise<TakeOutcome>
  /** The run id TAKE took ('' none taken). */
  takeId: (fields?: Partial<TakeFields>) => Promise<string>
  /** The queue entry a run's hash names. */
  entryOf: (id: string) => Promise<string>
} {
  const take = (fields: Partial<TakeFields> = {}): Promise<TakeOutcome> => TAKE.call(redis, {
    ...K, taker: 'sidecar-a', runKeyPrefix: runKey(''), look: '0', cappedCallers: '', startedAtMs: STARTED_AT, startedAtIso: new Date(STARTED_AT).toISOString(),
    woken: '', attempts: '', ...taking, ...fields
  })
  return {
    submit: (id, fields = {}) => SUBMIT.call(redis, {
      run: runKey(id), queue: K.queue, queuedBytes: K.queuedBytes, dueSet: K.dueSet, index: K.index, turns: K.turns, fair: K.fair, wake: K.wake,
      record: JSON.stringify(queuedOf(id)), request: REQUEST, body: 'hello', webhook: '', depth: 100, runId: id, maxBytes: 1000,
      expiry: '', createdAtMs: CREATED, urgency: '', caller: '', sub: '', ...submitted, ...fields
    }),
    take,
    takeId: async fields => {
      const taken = await take(fields)
      return taken.kind === 'taken' ? taken.run.runId : ''
    },
    entryOf: async id => await redis.hget(runKey(id), 'entry') as string
  }
}
