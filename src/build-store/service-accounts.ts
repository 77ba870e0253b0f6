import { randomUUID } from 'node:crypto'
import { InvalidBodyError } from '../errors.ts'
import type { CreatedServiceAccount, ServiceAccount } from './api-schemas.ts'
import type { Database } from './database.ts'
import { isDateTime } from './schema-check.ts'
import type { TokenSigner } from './token-signer.ts'

interface AccountRow { id: string, name: string, expires_at: Date, created_at: Date }

/**
 * Service accounts of each project and their tokens. The database keeps no token: only the
 * account, its `jti` and expiry, which is what revoking it needs.
 *
 * Revocation: on the embedded backend this process is the only writer, so a set in memory
 * (loaded at start, updated on revoke) answers at once; on PostgreSQL other store replicas may
 * revoke too, so the database is asked.
 */
export class ServiceAccounts {
  readonly #database: Database
  readonly #signer: TokenSigner
  /** jti → expiry (epoch ms); embedded backend only. */
  readonly #revoked: Map<string, number> | undefined

  private constructor (database: Database, signer: TokenSigner, revoked: Map<string, number> | undefined) {
    this.#database = database
    this.#signer = signer
    this.#revoked = revoked
  }

  static async open (database: Database, signer: TokenSigner): Promise<ServiceAccounts> {
    if (database.kind !== 'embedded') return new ServiceAccounts(database, signer, undefined)
    const rows = await database.query<{ jti: string, expires_at: Date }>(
      'SELECT jti, expires_at FROM service_accounts WHERE revoked_at IS NOT NULL AND expires_at > now()')
    return new ServiceAccounts(database, signer, new Map(rows.map(row => [row.jti, row.expires_at.getTime()])))
  }

  /**
   * Creates a service account of `projectId` and returns it with its token, whose `exp` is
   * `expiresAt` (cut to whole seconds). Throws InvalidBodyError unless `expiresAt` is in the future.
   */
  async create (projectId: string, name: string, expiresAt: Date | string): Promise<CreatedServiceAccount> {
    const expiresAtMs = typeof expiresAt === 'string'
      ? (isDateTime(expiresAt) ? Date.parse(expiresAt) : Number.NaN)
      : expiresAt.getTime()
    if (Number.isNaN(expiresAtMs)) throw new InvalidBodyError('invalid service account: expiresAt: expected an ISO 8601 time such as 2030-01-01T00:00:00Z')
    const exp = Math.floor(expiresAtMs / 1000)
    if (exp * 1000 <= Date.now()) throw new InvalidBodyError('invalid service account: expiresAt must be in the future')
    if (name.length === 0) throw new InvalidBodyError('invalid service account: name must not be empty')
    const id = randomUUID()
    const jti = randomUUID()
    const expiry = new Date(exp * 1000)
    const token = await this.#signer.sign({ sub: id, projectId, name, exp, jti })
    await this.#database.query(
      'INSERT INTO service_accounts (id, project_id, name, jti, expires_at, created_at) VALUES ($1, $2, $3, $4, $5, now())',
      [id, projectId, name, jti, expiry])
    return { id, name, expiresAt: expiry.toISOString(), token }
  }

  /** The project's accounts not revoked, oldest first; never their tokens. */
  async list (projectId: string): Promise<ServiceAccount[]> {
    const rows = await this.#database.query<AccountRow>(
      'SELECT id, name, expires_at, created_at FROM service_accounts WHERE project_id = $1 AND revoked_at IS NULL ORDER BY created_at, id',
      [projectId])
    return rows.map(row => ({ id: row.id, name: row.name, expiresAt: row.expires_at.toISOString(), createdAt: row.created_at.toISOString() }))
  }

  /** Revokes the account `id` of `projectId` at once; false when there is no such (unrevoked) account. */
  async revoke (projectId: string, id: string): Promise<boolean> {
    const rows = await this.#database.query<{ jti: string, expires_at: Date }>(
      'UPDATE service_accounts SET revoked_at = now() WHERE id = $1 AND project_id = $2 AND revoked_at IS NULL RETURNING jti, expires_at',
      [id, projectId])
    const row = rows[0]
    if (row === undefined) return false
    if (this.#revoked !== undefined) {
      const now = Date.now()
      for (const [jti, expiresAtMs] of this.#revoked) if (expiresAtMs <= now) this.#revoked.delete(jti)
      this.#revoked.set(row.jti, row.expires_at.getTime())
    }
    return true
  }

  /** Whether the token `jti` was revoked (synchronous on the embedded backend). */
  isRevoked (jti: string): boolean | Promise<boolean> {
    if (this.#revoked !== undefined) return this.#revoked.has(jti)
    return this.#database.query('SELECT 1 FROM service_accounts WHERE jti = $1 AND revoked_at IS NOT NULL', [jti])
      .then(rows => rows.length > 0)
  }

  /** The jti of every revoked token not yet expired, of every project. */
  async revokedTokens (): Promise<string[]> {
    const rows = await this.#database.query<{ jti: string }>(
      'SELECT jti FROM service_accounts WHERE revoked_at IS NOT NULL AND expires_at > now() ORDER BY revoked_at, jti')
    return rows.map(row => row.jti)
  }
}
