import { randomBytes } from 'node:crypto'
import pg from 'pg'

/**
 * A private schema for one bench run on a shared PostgreSQL: created at the start, dropped at the
 * end. The store reaches it through `url` (`search_path` set, and an `application_name` that lets
 * the bench find the backends serving it, to account their CPU).
 */
export interface BenchSchema {
  /** The database URL with `options=-c search_path=<schema>` and `application_name=<schema>`. */
  readonly url: string
  readonly name: string
  /** The backend processes serving `url` now, by name (`postgres backend <pid>`). */
  backends: () => Promise<Record<string, number>>
  drop: () => Promise<void>
}

/** Connects to `baseUrl` and creates the schema; throws (within ~3 s) when no database is reachable. */
export async function createBenchSchema (baseUrl: string): Promise<BenchSchema> {
  const name = `bench_${randomBytes(5).toString('hex')}`
  const admin = new pg.Client({ connectionString: baseUrl, connectionTimeoutMillis: 3000, application_name: `${name}_admin` })
  admin.on('error', () => {}) // a dropped idle connection must not crash the bench
  await admin.connect()
  try {
    await admin.query(`CREATE SCHEMA ${name}`)
  } catch (error) {
    await admin.end()
    throw error
  }
  const url = new URL(baseUrl)
  url.searchParams.set('options', `-c search_path=${name}`)
  url.searchParams.set('application_name', name)
  return {
    url: url.href,
    name,
    backends: async () => {
      const { rows } = await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [name])
      return Object.fromEntries(rows.map(r => [`postgres backend ${r.pid}`, r.pid]))
    },
    drop: async () => {
      try {
        await admin.query(`DROP SCHEMA IF EXISTS ${name} CASCADE`)
      } finally {
        await admin.end()
      }
    }
  }
}

/** The URL without its password, for messages. */
export function safeUrl (url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password !== '') parsed.password = '***'
    return parsed.href
  } catch {
    return '(not a URL)'
  }
}
