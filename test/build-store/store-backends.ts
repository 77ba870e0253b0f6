import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Database, openEmbeddedDatabase, openPostgresDatabase } from '../../src/build-store/database.ts'

/** One database for one test file, and how to throw it away. */
export interface TestBackend {
  readonly kind: Database['kind']
  readonly database: Database
  /** For a store that opens its own database: DATABASE_URL (PostgreSQL) or DATA_DIR (embedded). */
  readonly env: Record<string, string>
  /** Closes the database and removes what it held (the schema, the data folder). */
  dispose: () => Promise<void>
}

/** PGlite in a fresh temporary DATA_DIR (it takes seconds to start: one per test file). */
export async function embeddedBackend (): Promise<TestBackend> {
  const dataDir = await mkdtemp(join(tmpdir(), 'build-store-test-'))
  const database = await openEmbeddedDatabase(dataDir)
  return {
    kind: 'embedded',
    database,
    env: { DATA_DIR: dataDir },
    dispose: async () => {
      await database.close()
      await rm(dataDir, { recursive: true, force: true })
    }
  }
}

/** `url` with `search_path` set to `schema` for every connection. */
export function urlWithSchema (url: string, schema: string): string {
  const parsed = new URL(url)
  parsed.searchParams.set('options', `-c search_path=${schema}`)
  return parsed.href
}

/** A schema of its own on the PostgreSQL server at `url`, so test runs never collide; dropped by dispose(). */
export async function postgresBackend (url: string): Promise<TestBackend> {
  const schema = `store_test_${process.pid}_${randomBytes(4).toString('hex')}`
  const admin = openPostgresDatabase(url)
  await admin.query(`CREATE SCHEMA ${schema}`)
  const scopedUrl = urlWithSchema(url, schema)
  const database = openPostgresDatabase(scopedUrl)
  return {
    kind: 'postgres',
    database,
    env: { DATABASE_URL: scopedUrl },
    dispose: async () => {
      await database.close()
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
      await admin.close()
    }
  }
}
