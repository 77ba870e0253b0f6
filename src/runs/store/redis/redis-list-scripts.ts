import { arrayReply, defineScript, integerReply, luaFunction, textReply } from './redis-named-script.ts'
import { TRANSITION } from './redis-scripts.ts'

// The scripts over an app's runs as a whole, each in lua/<kebab-name>.lua. Their runs' keys are
// built from the app's key prefix (passed in ARGV): they are only known as the index or the queue
// is read, and share the app's hash tag (one slot).

/** A run of a page, as LIST_RUNS reads it: its id, its index score (created_at ms), its record and webhook state as stored. */
export interface ListedRun {
  readonly runId: string
  readonly score: number
  readonly record: string
  readonly webhookState: string
}

/** A page of the app's runs, newest first, of the statuses asked for (lua/list-runs.lua). */
export const LIST_RUNS = defineScript({
  name: 'LIST_RUNS',
  keys: ['index'],
  args: ['runKeyPrefix', 'maxScore', 'after', 'statuses', 'wanted'],
  reply: reply => {
    const flat = arrayReply('LIST_RUNS', reply)
    const runs: ListedRun[] = []
    for (let i = 0; i + 3 < flat.length; i += 4) {
      runs.push({ runId: textReply('LIST_RUNS', flat[i]), score: Number(textReply('LIST_RUNS', flat[i + 1])), record: textReply('LIST_RUNS', flat[i + 2]), webhookState: textReply('LIST_RUNS', flat[i + 3]) })
    }
    return runs
  }
})

/** Cancels the queued runs among up to `count` entries of the app's queue (lua/cancel-queued.lua), each as TRANSITION does. */
export const CANCEL_QUEUED = defineScript({
  name: 'CANCEL_QUEUED',
  keys: ['queue', 'queuedBytes', 'oldRunningSet', 'expiry', 'turns', 'index'],
  args: ['runKeyPrefix', 'eventsKeyPrefix', 'liveChannelPrefix', 'from', 'count', 'canceledFields', 'ttlSeconds', 'indexCutoffMs'],
  prelude: luaFunction('transition', TRANSITION),
  reply: reply => {
    const [canceled, last] = arrayReply('CANCEL_QUEUED', reply)
    return { canceled: integerReply('CANCEL_QUEUED', canceled), last: textReply('CANCEL_QUEUED', last) }
  }
})
