import { EventEmitter, once } from 'node:events'
import { Writable } from 'node:stream'
import { type Logger, pino } from 'pino'
import { RunStoreUnavailableError } from '../../../src/errors.ts'
import type { InternalErrorReporter } from '../../../src/shared/internal-errors.ts'
import { openRunStore } from '../../../src/runs/store/open-run-store.ts'
import type { KeyClaims } from '../../../src/runs/store/key-claims.ts'
import type { RunQueue } from '../../../src/runs/store/run-queue.ts'
import type { RunRecords } from '../../../src/runs/store/run-records.ts'
import type { RunStore, RunStoreSettings } from '../../../src/runs/store/run-store.ts'
import type { RunScope } from '../../../src/runs/run-data.ts'
import type { WebhookJob, WebhookSubmitter } from '../../../src/webhook/webhook-delivery.ts'

// What the unit tests of src/runs/stages/ share: the real memory run store (and the same store
// with one method failing), a logger and an internal-error reporter whose output a test can await,
// and a webhook sender that only keeps what it is handed.

export const SETTINGS: RunStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 10, queueMaxBytes: 1024 * 1024, scope: undefined }

/** The scope fake-call's default target (`/v4/proj/app/work`) names. */
export const SCOPE: RunScope = { projectId: 'proj', appName: 'app' }

interface Teardown { teardown: (fn: () => void | Promise<void>) => void }

/** The memory run store (RUN_STORE_URL unset), closed with the test. */
export async function memoryStore (t: Teardown, settings: Partial<RunStoreSettings> = {}): Promise<RunStore> {
  const store = await openRunStore(undefined, { ...SETTINGS, ...settings })
  t.teardown(() => store.close())
  return store
}

/** What a store part does instead of the real one's methods. */
export interface StoreParts {
  readonly keys?: Partial<KeyClaims>
  readonly records?: Partial<RunRecords>
  readonly queue?: Partial<RunQueue>
}

/** `store` with some of its parts' methods replaced (a store that fails, a write that is watched); the rest is the real store's. */
export function storeWith (store: RunStore, parts: StoreParts): RunStore {
  return {
    backend: store.backend,
    get available () { return store.available },
    queue: withMethods(store.queue, parts.queue),
    records: withMethods(store.records, parts.records),
    keys: withMethods(store.keys, parts.keys),
    listing: store.listing,
    deliveries: store.deliveries,
    cancelCall: async (scope, runId) => await store.cancelCall(scope, runId),
    listen: listener => { store.listen(listener) },
    close: async () => { await store.close() }
  }
}

function withMethods<T extends object> (real: T, replaced: Partial<T> | undefined): T {
  if (replaced === undefined) return real
  return new Proxy(real, {
    get (target, name) {
      if (Object.hasOwn(replaced, name)) return replaced[name as keyof T]
      const value: unknown = Reflect.get(target, name)
      // the memory store's methods read private fields: they run on the real part
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
    }
  })
}

/** A store method that rejects as a store that cannot be reached does. */
export const unavailable = async (): Promise<never> => { throw new RunStoreUnavailableError('test: store down') }

/** A logger (level warn) whose lines a test reads as they are written: `await log.next()` before the line is due. */
export function watchedLogger (): { readonly logger: Logger, readonly lines: Array<Record<string, unknown>>, next: () => Promise<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = []
  const written = new EventEmitter()
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      const line = JSON.parse(chunk.toString()) as Record<string, unknown>
      lines.push(line)
      written.emit('line', line)
      done()
    }
  })
  return {
    logger: pino({ level: 'warn' }, stream),
    lines,
    next: async () => ((await once(written, 'line')) as [Record<string, unknown>])[0]
  }
}

/** An internal-error reporter that keeps what it is told. */
export function watchedReports (): { readonly reportInternal: InternalErrorReporter, readonly reports: Array<{ error: unknown, fields: Record<string, unknown> | undefined }>, next: () => Promise<unknown> } {
  const reports: Array<{ error: unknown, fields: Record<string, unknown> | undefined }> = []
  const told = new EventEmitter()
  return {
    reportInternal: (error, fields) => {
      reports.push({ error, fields })
      told.emit('report', error)
    },
    reports,
    next: async () => ((await once(told, 'report')) as [unknown])[0]
  }
}

/** A webhook sender that delivers nothing: it keeps each job it is handed. */
export function keptWebhooks (): WebhookSubmitter & { readonly jobs: WebhookJob[] } {
  const jobs: WebhookJob[] = []
  return { jobs, submit: job => { jobs.push(job); return true } }
}
