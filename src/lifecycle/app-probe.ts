import { request } from 'node:http'
import { request as requestTls } from 'node:https'
import { connect } from 'node:net'
import { pathPrefix } from '../shared/url-paths.ts'
import { describeNetworkError } from '../shared/network-errors.ts'

export interface AppProbeOptions {
  appUrl: URL
  /** An HTTP path to GET (2xx or 3xx passes); undefined probes with a TCP connect. */
  path: string | undefined
  /** Pause between probes while the app is failing (and at start). */
  fastIntervalMs?: number
  /** Pause between probes while the app is passing. */
  slowIntervalMs?: number
  timeoutMs?: number
}

/**
 * Probes the app repeatedly: every `fastIntervalMs` while it fails (so start-up is seen at once),
 * every `slowIntervalMs` once it passes (so a change shows within slowInterval + timeout).
 */
export class AppProbe {
  #passing = false
  #lastFailure: string | undefined
  #timer: NodeJS.Timeout | undefined
  #stopped = false
  #firstPass: Array<() => void> = []
  readonly #options: Required<Omit<AppProbeOptions, 'path'>> & { path: string | undefined }

  constructor (options: AppProbeOptions) {
    this.#options = { fastIntervalMs: 100, slowIntervalMs: 5000, timeoutMs: 1000, ...options }
  }

  /** Whether the last probe passed. */
  get passing (): boolean { return this.#passing }

  /** Why the last failed probe failed (`connection refused`, `status 503`, `timeout`), for logs. */
  get lastFailure (): string | undefined { return this.#lastFailure }

  start (): void {
    this.#stopped = false
    void this.#tick()
  }

  stop (): void {
    this.#stopped = true
    clearTimeout(this.#timer)
    for (const wake of this.#firstPass) wake()
    this.#firstPass = []
  }

  /** Resolves when the app first passes (or when the probe stops). */
  passed (): Promise<void> {
    if (this.#passing || this.#stopped) return Promise.resolve()
    return new Promise(resolve => { this.#firstPass.push(resolve) })
  }

  async #tick (): Promise<void> {
    const failure = await this.#probeOnce()
    if (this.#stopped) return
    const ok = failure === undefined
    this.#passing = ok
    if (!ok) this.#lastFailure = failure
    if (ok && this.#firstPass.length > 0) {
      for (const wake of this.#firstPass) wake()
      this.#firstPass = []
    }
    this.#timer = setTimeout(() => { void this.#tick() }, ok ? this.#options.slowIntervalMs : this.#options.fastIntervalMs)
    this.#timer.unref()
  }

  /** Undefined when the app passed, else why it did not. */
  #probeOnce (): Promise<string | undefined> {
    const { appUrl, path, timeoutMs } = this.#options
    const port = Number(appUrl.port === '' ? (appUrl.protocol === 'https:' ? 443 : 80) : appUrl.port)
    const host = appUrl.hostname.replace(/^\[|\]$/g, '')
    return new Promise(resolve => {
      if (path === undefined) {
        const socket = connect({ host, port, timeout: timeoutMs })
        const done = (failure: string | undefined): void => { socket.destroy(); resolve(failure) }
        socket.once('connect', () => { done(undefined) })
        socket.once('timeout', () => { done('timeout') })
        socket.once('error', (error: Error) => { done(describeNetworkError(error)) })
        return
      }
      const basePath = pathPrefix(appUrl)
      const send = appUrl.protocol === 'https:' ? requestTls : request
      const req = send({ host, port, path: basePath + path, method: 'GET', agent: false, timeout: timeoutMs, headers: { 'user-agent': 'app-sidecar-probe' } }, res => {
        res.resume()
        const status = res.statusCode ?? 0
        resolve(status >= 200 && status < 400 ? undefined : `status ${status}`)
      })
      req.once('timeout', () => { req.destroy(new Error('timeout')) })
      req.once('error', (error: Error) => { resolve(describeNetworkError(error)) })
      req.end()
    })
  }
}
