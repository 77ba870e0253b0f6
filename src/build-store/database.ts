import { mkdir } from 'node:fs/promises'
import { PGlite } from '@electric-sql/pglite'
import pg from 'pg'
import { type DataDirLock, lockDataDir } from './data-dir-lock.ts'

/** Runs one SQL statement with `$1…` parameters and returns its rows. */
export interface Queryable {
  query: <T>(sql: string, params?: readonly unknown[]) => Promise<T[]>
}

/** The store's one view of its database, whichever backend holds it. */
export interface Database extends Queryable {
  /**
   * `embedded` (PGlite): this process is the database's only user, so in-memory caches are the
   * truth. `postgres`: other store replicas may write too.
   */
  readonly kind: 'embedded' | 'postgres'
  /** Runs `work` inside one transaction on one connection; rolls back when it throws. */
  transaction: <T>(work: (tx: Queryable) => Promise<T>) => Promise<T>
  close: () => Promise<void>
}

/** PostgreSQL through a `pg` pool. `url` may carry `?options=-c search_path=…` to pick a schema. */
export function openPostgresDatabase (url: string, onIdleError: (error: Error) => void = () => {}): Database {
  const pool = new pg.Pool({ connectionString: url, max: 10, idleTimeoutMillis: 30_000 })
  pool.on('error', onIdleError) // a dropped idle connection must not crash the process
  const run = async <T>(client: pg.Pool | pg.PoolClient, sql: string, params?: readonly unknown[]): Promise<T[]> =>
    (await client.query(sql, params as unknown[] | undefined)).rows as T[]
  return {
    kind: 'postgres',
    query: (sql, params) => run(pool, sql, params),
    transaction: async work => {
      const client = await pool.connect()
      try {
        await client.query('BEGIN')
        const result = await work({ query: (sql, params) => run(client, sql, params) })
        await client.query('COMMIT')
        return result
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {})
        throw error
      } finally {
        client.release()
      }
    },
    close: () => pool.end()
  }
}

/**
 * Embedded PostgreSQL (PGlite) kept in `dataDir`, created when missing; in memory without one.
 * The folder is locked to this process until close() (DataDirInUseError while another holds it).
 */
export async function openEmbeddedDatabase (dataDir?: string): Promise<Database> {
  let lock: DataDirLock | undefined
  if (dataDir !== undefined) {
    await mkdir(dataDir, { recursive: true })
    lock = await lockDataDir(dataDir)
  }
  let db: PGlite
  try {
    db = await PGlite.create(dataDir)
  } catch (error) {
    lock?.release()
    throw error
  }
  return {
    kind: 'embedded',
    query: async (sql, params) => (await db.query(sql, params as unknown[] | undefined)).rows as never,
    transaction: work => db.transaction(tx => work({
      query: async (sql, params) => (await tx.query(sql, params as unknown[] | undefined)).rows as never
    })),
    close: async () => {
      try {
        await db.close()
      } finally {
        lock?.release()
      }
    }
  }
}
