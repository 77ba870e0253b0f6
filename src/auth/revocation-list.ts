import { fetchBoundedJson } from './bounded-json.ts'

/**
 * Largest revocation list read (about 100,000 revoked, unexpired UUID jtis). More generous than the
 * JWKS cap: a list that hits it stops updating, so new revocations would no longer bite.
 */
export const REVOCATION_LIST_MAX_BYTES = 4 * 1024 * 1024

export interface RevocationListOptions {
  /** `GET` answers `{"revoked": [jti, …]}`. */
  url: URL
  /**
   * Time between refreshes: at most 15 s, so a revocation bites within 30 s (the Revocation
   * item of docs/routes.md, "`/v4/{project_id}/{app_name}/{path…}`: call the app").
   */
  intervalMs?: number
  /** Deadline for one fetch, headers and body. */
  timeoutMs?: number
}

/**
 * The store's public list of revoked token ids, refreshed in the background. While the store
 * cannot be reached, the last list fetched stays in force (valid tokens keep working).
 */
export class RevocationList {
  #revoked: ReadonlySet<string> = new Set()
  #timer: NodeJS.Timeout | undefined
  #stopped = false
  #refreshed = 0
  readonly #options: Required<RevocationListOptions>

  constructor (options: RevocationListOptions) {
    this.#options = { intervalMs: 10_000, timeoutMs: 5_000, ...options }
  }

  has (jti: string | undefined): boolean {
    return jti !== undefined && this.#revoked.has(jti)
  }

  /** Successful refreshes so far (for tests and logs). */
  get refreshed (): number { return this.#refreshed }

  /** Fetches at once, then every interval. Resolves after the first attempt. */
  async start (): Promise<void> {
    this.#stopped = false
    await this.refresh()
    this.#schedule()
  }

  stop (): void {
    this.#stopped = true
    clearTimeout(this.#timer)
  }

  /** One fetch; keeps the previous list on any failure (an error status, garbage, a body past the cap). */
  async refresh (): Promise<void> {
    try {
      const body = await fetchBoundedJson(this.#options.url, { maxBytes: REVOCATION_LIST_MAX_BYTES, timeoutMs: this.#options.timeoutMs }) as { revoked?: unknown } | null
      if (Array.isArray(body?.revoked)) {
        this.#revoked = new Set(body.revoked.filter((jti): jti is string => typeof jti === 'string'))
        this.#refreshed++
      }
    } catch {
      // the store is unreachable or answered garbage: keep the last list
    }
  }

  #schedule (): void {
    if (this.#stopped) return
    this.#timer = setTimeout(() => { void this.refresh().then(() => { this.#schedule() }) }, this.#options.intervalMs)
    this.#timer.unref()
  }
}
