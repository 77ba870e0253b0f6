import { randomBytes } from 'node:crypto'
import type { OutgoingHttpHeaders } from 'node:http'
import { loadStoreConfig } from '../../../src/build-store/store-config.ts'
import { type BuildStoreOptions, type RunningBuildStore, startBuildStore } from '../../../src/build-store/store-server.ts'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import type { TestBackend } from '../store-backends.ts'

export const ADMIN_TOKEN = 'test-admin-token-0123456789'
export const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` }
export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
export const JSON_TYPE = 'application/json; charset=utf-8'

export type LogLine = Record<string, unknown>

/** A store in this process, on the file's database, with its log lines captured. */
export interface TestStore {
  readonly store: RunningBuildStore
  readonly base: string
  readonly logs: LogLine[]
  /** One request to this store (raw path, nothing normalised). */
  request: (path: string, options?: { method?: string, headers?: OutgoingHttpHeaders, body?: string | Buffer | Array<string | Buffer> }) => Promise<SentResponse>
  close: () => Promise<void>
}

/** What every part of the suite gets: the backend and the file's main store. */
export interface SuiteContext {
  readonly backend: TestBackend
  readonly main: TestStore
  /** A project id no other test uses, so tests sharing the database never see each other's rows. */
  project: () => string
  /** Another store on the same database; the caller closes it. */
  startStore: (env?: Record<string, string>, options?: Omit<BuildStoreOptions, 'database' | 'logDestination'>) => Promise<TestStore>
}

export async function startTestStore (backend: TestBackend, env: Record<string, string> = {}, options: BuildStoreOptions = {}): Promise<TestStore> {
  const logs: LogLine[] = []
  const config = loadStoreConfig({ PORT: '0', HOST: '127.0.0.1', ADMIN_TOKEN, LOG_LEVEL: 'info', ...env })
  const store = await startBuildStore(config, {
    database: backend.database,
    logDestination: { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } },
    ...options
  })
  return {
    store,
    base: store.url,
    logs,
    request: (path, requestOptions) => send(`${store.url}${path}`, requestOptions),
    close: () => store.close()
  }
}

export function newProjectId (): string {
  return `p-${randomBytes(6).toString('hex')}`
}

/** `{"message": …}` exactly, as JSON. */
export const messageBody = (message: string) => ({ message })
