import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import pino, { type DestinationStream, type Logger } from 'pino'
import { answerClientError } from '../shared/http-answers.ts'
import { BuildRepository } from './build-repository.ts'
import { type Database, openEmbeddedDatabase, openPostgresDatabase } from './database.ts'
import { migrate } from './migrations.ts'
import { buildOpenApiDocument } from './openapi.ts'
import { MAX_JSON_BODY_BYTES } from './request-json.ts'
import { ServiceAccounts } from './service-accounts.ts'
import { StoreAuth } from './store-auth.ts'
import type { StoreConfig } from './store-config.ts'
import { createStoreHandler } from './store-routes.ts'
import { TokenSigner } from './token-signer.ts'

export interface BuildStoreOptions {
  /** Where log lines go (default: stdout). */
  logDestination?: DestinationStream
  /** An open database to use instead of the one the config names; it is left open by close(). */
  database?: Database
  /** Most verified tokens remembered (default 10,000). */
  tokenCacheSize?: number
  /** Memory for build JSON on the embedded backend (default 32 MiB; 0 turns the cache off). */
  buildCacheBytes?: number
  /** Largest request body (default 1 MiB). */
  maxBodyBytes?: number
}

export interface RunningBuildStore {
  readonly port: number
  /** `http://<host>:<port>`, with a loopback address when the store listens on all of them. */
  readonly url: string
  readonly logger: Logger
  readonly database: Database
  /** Put and read builds in-process (the demo seeds one). */
  readonly builds: BuildRepository
  /** Create, list and revoke service accounts in-process; `create` returns the token. */
  readonly serviceAccounts: ServiceAccounts
  readonly signer: TokenSigner
  readonly auth: StoreAuth
  /** Stops listening, cuts open connections and closes the database it opened. */
  close: () => Promise<void>
}

/** The store's pino logger; tokens and the database URL never reach it. */
function createStoreLogger (level: StoreConfig['logLevel'], destination?: DestinationStream): Logger {
  return pino({
    level,
    base: { name: 'build-store' },
    redact: { paths: ['authorization', 'token', 'headers.authorization', 'req.headers.authorization', 'databaseUrl'], censor: '[redacted]' }
  }, destination ?? pino.destination({ dest: 1, sync: false }))
}

/**
 * Starts the build store: opens its database (PostgreSQL at DATABASE_URL, else PGlite in
 * DATA_DIR), applies the migrations, loads or creates the signing key, then listens.
 */
export async function startBuildStore (config: StoreConfig, options: BuildStoreOptions = {}): Promise<RunningBuildStore> {
  const logger = createStoreLogger(config.logLevel, options.logDestination)
  const ownsDatabase = options.database === undefined
  const database = options.database ?? (config.databaseUrl === undefined
    ? await openEmbeddedDatabase(config.dataDir)
    : openPostgresDatabase(config.databaseUrl, error => { logger.warn({ err: error }, 'idle database connection failed') }))
  let server: Server | undefined
  try {
    const applied = await migrate(database)
    if (applied.length > 0) logger.info({ versions: applied }, 'migrations applied')
    const signer = await TokenSigner.open(database)
    const serviceAccounts = await ServiceAccounts.open(database, signer)
    const builds = new BuildRepository(database, options.buildCacheBytes)
    const auth = new StoreAuth({ adminToken: config.adminToken, signer, serviceAccounts, cacheSize: options.tokenCacheSize })
    const handler = createStoreHandler({
      auth,
      builds,
      serviceAccounts,
      logger,
      jwksJson: JSON.stringify(signer.jwks),
      openApiJson: JSON.stringify(buildOpenApiDocument()),
      maxBodyBytes: options.maxBodyBytes ?? MAX_JSON_BODY_BYTES
    })
    const listening = createServer({ keepAliveTimeout: 65_000, headersTimeout: 60_000, requestTimeout: 60_000 }, handler)
    server = listening
    listening.on('clientError', answerClientError)
    await new Promise<void>((resolve, reject) => {
      listening.once('error', reject)
      listening.listen(config.port, config.host, () => { listening.off('error', reject); resolve() })
    })
    const port = (listening.address() as AddressInfo).port
    const url = `http://${urlHost(config.host)}:${port}`
    logger.info({ port, host: config.host, backend: database.kind, admin: config.adminToken !== undefined, kid: signer.kid }, 'build store listening')
    return {
      port,
      url,
      logger,
      database,
      builds,
      serviceAccounts,
      signer,
      auth,
      close: async () => {
        listening.closeAllConnections()
        await new Promise(resolve => listening.close(resolve))
        if (ownsDatabase) await database.close()
      }
    }
  } catch (error) {
    server?.close()
    if (ownsDatabase) await database.close().catch(() => {})
    throw error
  }
}

function urlHost (host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1'
  if (host === '::') return '[::1]'
  return host.includes(':') ? `[${host}]` : host
}
