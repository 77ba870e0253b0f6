import { resolve } from 'node:path'
import { type EnvParser, LOG_LEVELS, type LogLevel, oneOf, parseHttpUrl, parsePort } from '../config/env-parsers.ts'
import { ConfigError } from '../errors.ts'
import { type EnvVariable, envHelpRows, envVariable, loadEnvTable } from '../config/env-table.ts'

/** The build store's whole configuration, validated. */
export interface StoreConfig {
  port: number
  host: string
  /** A PostgreSQL URL; undefined = embedded PostgreSQL (PGlite) in `dataDir`. */
  databaseUrl: string | undefined
  /** Absolute path of the embedded database folder. */
  dataDir: string
  /** Bearer token of the write routes; undefined = write routes disabled. */
  adminToken: string | undefined
  logLevel: LogLevel
}

/** What the admin sub-commands need: where the running store is, and the admin token. */
export interface StoreClientConfig {
  storeUrl: URL
  adminToken: string
}

/** RFC 6750 token characters, so the token fits an `Authorization: Bearer` header as it is. */
const TOKEN_CHARACTERS = /^[A-Za-z0-9\-._~+/]+=*$/
const MIN_ADMIN_TOKEN_LENGTH = 16

const parseAdminToken: EnvParser<string | undefined> = (name, raw) => {
  if (!TOKEN_CHARACTERS.test(raw)) {
    throw new ConfigError(name, 'expected letters, digits and - . _ ~ + / (then = padding), without spaces')
  }
  if (raw.length < MIN_ADMIN_TOKEN_LENGTH) {
    throw new ConfigError(name, `expected at least ${MIN_ADMIN_TOKEN_LENGTH} characters, got ${raw.length}`)
  }
  return raw
}

/** A `postgres://` or `postgresql://` URL; the value itself is never echoed (it may hold a password). */
const parseDatabaseUrl: EnvParser<string | undefined> = (name, raw) => {
  let url: URL | undefined
  try { url = new URL(raw.trim()) } catch { url = undefined }
  if (url === undefined || (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') || url.hostname === '') {
    throw new ConfigError(name, 'expected a URL like postgres://user:password@host:5432/database')
  }
  return raw.trim()
}

const parseHost: EnvParser<string> = (_name, raw) => raw.trim()
const parseDataDir: EnvParser<string> = (_name, raw) => resolve(raw)

const variable = envVariable<StoreConfig>()

const STORE_VARIABLES = [
  variable({ name: 'PORT', key: 'port', defaultText: '7070', meaning: 'listener; 0 picks a free port', parse: parsePort, fallback: () => 7070 }),
  variable({ name: 'HOST', key: 'host', defaultText: '0.0.0.0', meaning: 'bind address', parse: parseHost, fallback: () => '0.0.0.0' }),
  variable({ name: 'DATABASE_URL', key: 'databaseUrl', defaultText: undefined, meaning: 'PostgreSQL URL; unset = embedded PostgreSQL in DATA_DIR', parse: parseDatabaseUrl, fallback: () => undefined }),
  variable({ name: 'DATA_DIR', key: 'dataDir', defaultText: './data', meaning: 'embedded database folder', parse: parseDataDir, fallback: () => resolve('data') }),
  variable({ name: 'ADMIN_TOKEN', key: 'adminToken', defaultText: undefined, meaning: 'bearer token of the write routes; unset = writes disabled', parse: parseAdminToken, fallback: () => undefined }),
  variable({ name: 'LOG_LEVEL', key: 'logLevel', defaultText: 'info', meaning: LOG_LEVELS.join(' | '), parse: oneOf(LOG_LEVELS), fallback: (): LogLevel => 'info' })
] as const

/**
 * Reads every store variable from `env`. An empty value counts as unset.
 * Throws a ConfigError naming the first invalid variable.
 */
export function loadStoreConfig (env: NodeJS.ProcessEnv = process.env): StoreConfig {
  return loadEnvTable(STORE_VARIABLES as ReadonlyArray<EnvVariable<StoreConfig>>, env)
}

/** `STORE_URL` and `ADMIN_TOKEN` for the admin sub-commands; both are needed. */
export function loadStoreClientConfig (env: NodeJS.ProcessEnv = process.env): StoreClientConfig {
  const rawUrl = env.STORE_URL
  const storeUrl = rawUrl === undefined || rawUrl === '' ? new URL('http://127.0.0.1:7070') : parseHttpUrl('STORE_URL', rawUrl)
  const rawToken = env.ADMIN_TOKEN
  if (rawToken === undefined || rawToken === '') throw new ConfigError('ADMIN_TOKEN', 'must be set to the store\'s admin token')
  return { storeUrl, adminToken: parseAdminToken('ADMIN_TOKEN', rawToken) as string }
}

/** The `--help` text: sub-commands, every variable with its default and meaning, the routes. */
export function storeHelp (): string {
  const rows = envHelpRows(STORE_VARIABLES as ReadonlyArray<EnvVariable<StoreConfig>>, 16, 24)
  return [
    'build-store: the central build store (builds, service accounts, token keys).',
    '',
    'Usage:',
    '  build-store                         serve (configured by the variables below)',
    '  build-store create-service-account --project P --name N --expires-at ISO-8601',
    '  build-store list-service-accounts  --project P',
    '  build-store revoke-service-account --project P --id ID',
    '  build-store put-build --project P --app A --build B --file build.json   (--file - reads stdin)',
    '  build-store --help | --version',
    '',
    'Server variables:',
    `  ${'VARIABLE'.padEnd(16)}${'DEFAULT'.padEnd(24)}MEANING`,
    ...rows,
    '',
    'Sub-command variables (they call a running store over HTTP and print its JSON answer):',
    `  ${'STORE_URL'.padEnd(16)}${'http://127.0.0.1:7070'.padEnd(24)}the running store`,
    `  ${'ADMIN_TOKEN'.padEnd(16)}${'unset'.padEnd(24)}the store's admin token (required)`,
    '',
    'Routes: GET|PUT /v2/projects/{project_id}/apps/{app_id}/builds/{build_id},',
    '        GET|POST /v2/projects/{project_id}/service-accounts, DELETE /v2/projects/{project_id}/service-accounts/{id},',
    '        GET /.well-known/jwks.json, GET /.well-known/revoked-tokens, GET /openapi.json, GET /healthz',
    ''
  ].join('\n')
}
