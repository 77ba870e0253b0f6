import pRetry, { AbortError } from 'p-retry'
import { boundedGet } from '../shared/bounded-get.ts'
import { ConfigError } from '../errors.ts'
import { underUrl } from '../shared/url-paths.ts'
import { loadSidecarConfig, type SidecarConfig } from './sidecar-config.ts'

/** The Build fields a sidecar takes its app settings from (the rest of the Build is not its business). */
interface BuildSettings {
  name?: string
  port?: number
  runtime?: string
  disableAuth?: boolean
  replicaConcurrency?: number
  healthcheckEndpoint?: string
  readycheckEndpoint?: string
  deadlineSeconds?: number
  responseGracePeriodSeconds?: number
  deploymentInitializationTimeout?: number
  computeTier?: string
}

/** RUN_MAX_ATTEMPTS of a build on interruptible capacity (docs/configuration.md, "Settings from a build"). */
const INTERRUPTIBLE_ATTEMPTS = '3'

/** Build field → the sidecar variable it stands for (undefined: the field leaves it unset). */
const SETTINGS: Array<[keyof BuildSettings, string, (value: never) => string | undefined]> = [
  ['name', 'APP_NAME', String],
  ['port', 'APP_URL', (port: number) => `http://127.0.0.1:${port}`],
  ['runtime', 'RUNTIME', String],
  ['disableAuth', 'DISABLE_AUTH', String],
  ['replicaConcurrency', 'REPLICA_CONCURRENCY', String],
  ['healthcheckEndpoint', 'HEALTHCHECK_PATH', String],
  ['readycheckEndpoint', 'READYCHECK_PATH', String],
  ['deadlineSeconds', 'DEADLINE_SECONDS', String],
  ['responseGracePeriodSeconds', 'RESPONSE_GRACE_PERIOD_SECONDS', String],
  ['deploymentInitializationTimeout', 'APP_READY_TIMEOUT_SECONDS', String],
  ['computeTier', 'RUN_MAX_ATTEMPTS', (tier: string) => tier === 'interruptible' ? INTERRUPTIBLE_ATTEMPTS : undefined]
]

export interface BuildFetchOptions {
  /** Attempts while the store is unreachable or failing (default 6, about 10 s in all). */
  attempts?: number
  minDelayMs?: number
}

/**
 * `BUILD_ID` set: reads the build from the store (retrying with back-off while the store is
 * unreachable) and returns the configuration with the build's app settings filled in wherever
 * the environment did not set the variable itself: explicit variables win.
 */
export async function applyBuildSettings (config: SidecarConfig, env: NodeJS.ProcessEnv, options: BuildFetchOptions = {}): Promise<SidecarConfig> {
  if (config.buildId === undefined) return config
  const build = await fetchBuild(config, options)
  const merged: NodeJS.ProcessEnv = { ...env }
  for (const [field, variable, toEnv] of SETTINGS) {
    const value = build[field]
    if (value === undefined || value === null || (env[variable] !== undefined && env[variable] !== '')) continue
    const setting = toEnv(value as never)
    if (setting !== undefined) merged[variable] = setting
  }
  try {
    return loadSidecarConfig(merged)
  } catch (error) {
    if (error instanceof ConfigError) throw new ConfigError('BUILD_ID', `build ${config.buildId} sets ${error.message}`)
    throw error
  }
}

/** A build's JSON is a few KiB; a store answering more than this is not answering a build. */
const BUILD_MAX_BYTES = 1024 * 1024

async function fetchBuild (config: SidecarConfig, options: BuildFetchOptions): Promise<BuildSettings> {
  const path = `v2/projects/${config.projectId as string}/apps/${config.appId as string}/builds/${config.buildId as string}`
  const url = underUrl(config.storeUrl, path)
  const headers: Record<string, string> = { accept: 'application/json' }
  if (config.storeToken !== undefined) headers.authorization = `Bearer ${config.storeToken}`
  const attempts = options.attempts ?? 6
  try {
    return await pRetry(async () => {
      let response
      try {
        response = await boundedGet(url, { headers, timeoutMs: 5000, maxBytes: BUILD_MAX_BYTES })
      } catch (error) {
        throw new Error(`store unreachable (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`)
      }
      const text = response.body.toString('utf8')
      if (response.status === 200) return JSON.parse(text) as BuildSettings
      const failure = new Error(`store answered ${response.status} ${text.slice(0, 200)}`)
      // 4xx will not change by asking again (bad token, no such build); 5xx might
      throw response.status < 500 ? new AbortError(failure) : failure
    }, { retries: attempts - 1, minTimeout: options.minDelayMs ?? 250, maxTimeout: 4000, factor: 2 })
  } catch (error) {
    throw new ConfigError('BUILD_ID', `cannot read build ${config.buildId as string} from ${url.origin}: ${(error as Error).message}`)
  }
}
