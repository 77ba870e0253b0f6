import type { Database } from './database.ts'

/** One schema change; `statements` run in order, one statement each (both backends' drivers take one per query). */
export interface Migration {
  readonly version: number
  readonly name: string
  readonly statements: readonly string[]
}

/** Every migration, oldest first. Never edit one that has shipped: add the next. */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'builds, service accounts, signing keys',
    statements: [
      `CREATE TABLE builds (
        project_id text NOT NULL,
        app_id text NOT NULL,
        build_id text NOT NULL,
        fields json NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (project_id, app_id, build_id)
      )`,
      `CREATE TABLE service_accounts (
        id text PRIMARY KEY,
        project_id text NOT NULL,
        name text NOT NULL,
        jti text NOT NULL UNIQUE,
        expires_at timestamptz NOT NULL,
        created_at timestamptz NOT NULL,
        revoked_at timestamptz
      )`,
      'CREATE INDEX service_accounts_by_project ON service_accounts (project_id, created_at)',
      'CREATE INDEX service_accounts_revoked ON service_accounts (expires_at) WHERE revoked_at IS NOT NULL',
      `CREATE TABLE signing_keys (
        kid text PRIMARY KEY,
        alg text NOT NULL,
        private_jwk json NOT NULL,
        public_jwk json NOT NULL,
        created_at timestamptz NOT NULL
      )`
    ]
  }
]

/** Serialises concurrent starts of several stores on one PostgreSQL database. */
const MIGRATION_LOCK = 707_000_001

/**
 * Applies the migrations not yet recorded in `schema_migrations`, in order, all in one
 * transaction under an advisory lock; returns the versions applied now.
 */
export async function migrate (database: Database, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  return await database.transaction(async tx => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK])
    await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`)
    const done = new Set((await tx.query<{ version: number }>('SELECT version FROM schema_migrations')).map(row => row.version))
    const applied: number[] = []
    for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
      if (done.has(migration.version)) continue
      for (const statement of migration.statements) await tx.query(statement)
      await tx.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [migration.version, migration.name])
      applied.push(migration.version)
    }
    return applied
  })
}
