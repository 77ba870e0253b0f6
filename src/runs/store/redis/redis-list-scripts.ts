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
  reply: reply => listedRuns('LIST_RUNS', arrayReply('LIST_RUNS', reply), 0)
})

/** A step of a page of one caller's runs (lua/list-own-runs.lua): the runs found, and where the next step goes on (undefined: none). */
export interface OwnRunsStep {
  readonly runs: readonly ListedRun[]
  readonly stopped: { readonly score: string, readonly runId: string } | undefined
}

/** One step of a page of the runs one `sub` submitted, newest first, of the statuses asked for, reading at most `budget` runs (lua/list-own-runs.lua). */
export const LIST_OWN_RUNS = defineScript({
  name: 'LIST_OWN_RUNS',
  keys: ['index'],
  args: ['runKeyPrefix', 'maxScore', 'after', 'statuses', 'wanted', 'sub', 'budget'],
  reply: (reply): OwnRunsStep => {
    const flat = arrayReply('LIST_OWN_RUNS', reply)
    const stopped = textReply('LIST_OWN_RUNS', flat[0])
    const space = stopped.indexOf(' ')
    return {
      runs: listedRuns('LIST_OWN_RUNS', flat, 1),
      stopped: stopped === '' ? undefined : { score: stopped.slice(0, space), runId: stopped.slice(space + 1) }
    }
  }
})

/** The runs of a list reply from `from` on: run id, score, record and webhook state each. */
function listedRuns (name: string, flat: readonly unknown[], from: number): ListedRun[] {
  const runs: ListedRun[] = []
  for (let i = from; i + 3 < flat.length; i += 4) {
    runs.push({ runId: textReply(name, flat[i]), score: Number(textReply(name, flat[i + 1])), record: textReply(name, flat[i + 2]), webhookState: textReply(name, flat[i + 3]) })
  }
  return runs
}

/** Cancels the queued runs among up to `count` entries of the app's queue (lua/cancel-queued.lua), each as TRANSITION does. */
export const CANCEL_QUEUED = defineScript({
  name: 'CANCEL_QUEUED',
  keys: ['queue', 'queuedBytes', 'oldRunningSet', 'expiry', 'turns', 'index'],
  args: ['runKeyPrefix', 'eventsKeyPrefix', 'liveChannelPrefix', 'from', 'count', 'canceledFields', 'ttlSeconds', 'indexCutoffMs', 'bySub', 'sub'],
  prelude: luaFunction('transition', TRANSITION),
  reply: reply => {
    const [canceled, last] = arrayReply('CANCEL_QUEUED', reply)
    return { canceled: integerReply('CANCEL_QUEUED', canceled), last: textReply('CANCEL_QUEUED', last) }
  }
})
