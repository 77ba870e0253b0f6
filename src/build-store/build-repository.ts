import { LRUCache } from 'lru-cache'
import { type Build, type BuildFields, type BuildKey, composeBuild } from './build-schema.ts'
import type { Database } from './database.ts'

/** A build as stored, with its JSON text ready to send. */
interface StoredBuild {
  readonly build: Build
  readonly json: string
  /** True when the PUT created it, false when it replaced one. */
  readonly created: boolean
}

interface BuildRow { fields: BuildFields, created_at: Date, updated_at: Date }
interface UpsertRow { created_at: Date, updated_at: Date, created: boolean }

const cacheKey = (key: BuildKey): string => `${key.projectId}/${key.appId}/${key.buildId}`

/**
 * Builds by project, app and build id. On the embedded backend this process is the only writer,
 * so the JSON of builds read or written is kept in memory (bounded by bytes) and replaced on PUT;
 * on PostgreSQL, where other replicas may write, every read goes to the database.
 */
export class BuildRepository {
  readonly #database: Database
  readonly #cache: LRUCache<string, string> | undefined

  constructor (database: Database, cacheBytes = 32 * 1024 * 1024) {
    this.#database = database
    this.#cache = database.kind === 'embedded' && cacheBytes > 0
      ? new LRUCache({ maxSize: cacheBytes, maxEntrySize: cacheBytes, sizeCalculation: json => json.length })
      : undefined
  }

  /** Creates or replaces the build at `key`; `createdAt` survives a replace, `updatedAt` is now. */
  async put (key: BuildKey, fields: BuildFields): Promise<StoredBuild> {
    // the database's clock, cut to what ISO 8601 with milliseconds shows, so replicas agree;
    // statement_timestamp() is one value for the whole statement, so a new build's two times are equal
    const rows = await this.#database.query<UpsertRow>(`
      INSERT INTO builds (project_id, app_id, build_id, fields, created_at, updated_at)
      VALUES ($1, $2, $3, $4, date_trunc('milliseconds', statement_timestamp()), date_trunc('milliseconds', statement_timestamp()))
      ON CONFLICT (project_id, app_id, build_id)
      DO UPDATE SET fields = EXCLUDED.fields, updated_at = EXCLUDED.updated_at
      RETURNING created_at, updated_at, (xmax = 0) AS created`,
    [key.projectId, key.appId, key.buildId, JSON.stringify(fields)])
    const row = rows[0] as UpsertRow
    const build = composeBuild(key, fields, row.created_at, row.updated_at)
    const json = JSON.stringify(build)
    this.#remember(cacheKey(key), json)
    return { build, json, created: row.created }
  }

  /** The JSON text of the build at `key`, or undefined when there is none. */
  async get (key: BuildKey): Promise<string | undefined> {
    const name = cacheKey(key)
    const cached = this.#cache?.get(name)
    if (cached !== undefined) return cached
    const rows = await this.#database.query<BuildRow>(
      'SELECT fields, created_at, updated_at FROM builds WHERE project_id = $1 AND app_id = $2 AND build_id = $3',
      [key.projectId, key.appId, key.buildId])
    const row = rows[0]
    if (row === undefined) return undefined
    const json = JSON.stringify(composeBuild(key, row.fields, row.created_at, row.updated_at))
    this.#remember(name, json)
    return json
  }

  /** JSON texts held in memory (0 on PostgreSQL). */
  get cachedBuilds (): number { return this.#cache?.size ?? 0 }

  #remember (name: string, json: string): void {
    this.#cache?.set(name, json)
  }
}
