import { request } from 'node:http'
import { request as requestTls } from 'node:https'
import { connect } from 'node:net'

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
  #timer: NodeJS.Timeout | undefined
  #stopped = false
  #firstPass: Array<() => void> = []
  readonly #options: Required<Omit<AppProbeOptions, 'path'>> & { path: string | undefined }

  constructor (options: AppProbeOptions) {
    this.#options = { fastIntervalMs: 100, slowIntervalMs: 5000, timeoutMs: 1000, ...options }
  }

  /** Whether the last probe passed. */
  get passing (): boolean { return this.#passing }

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
    const ok = await this.#probeOnce()
    if (this.#stopped) return
    this.#passing = ok
    if (ok && this.#firstPass.length > 0) {
      for (const wake of this.#firstPass) wake()
      this.#firstPass = []
    }
    this.#timer = setTimeout(() => { void this.#tick() }, ok ? this.#options.slowIntervalMs : this.#options.fastIntervalMs)
    this.#timer.unref()
  }

  #probeOnce (): Promise<boolean> {
    const { appUrl, path, timeoutMs } = this.#options
    const port = Number(appUrl.port === '' ? (appUrl.protocol === 'https:' ? 443 : 80) : appUrl.port)
    const host = appUrl.hostname.replace(/^\[|\]$/g, '')
    return new Promise(resolve => {
      if (path === undefined) {
        const socket = connect({ host, port, timeout: timeoutMs })
        const done = (ok: boolean): void => { socket.destroy(); resolve(ok) }
        socket.once('connect', () => { done(true) })
        socket.once('timeout', () => { done(false) })
        socket.once('error', () => { done(false) })
        return
      }
      const basePath = appUrl.pathname.replace(/\/$/, '')
      const send = appUrl.protocol === 'https:' ? requestTls : request
      const req = send({ host, port, path: basePath + path, method: 'GET', agent: false, timeout: timeoutMs, headers: { 'user-agent': 'app-sidecar-probe' } }, res => {
        res.resume()
        const status = res.statusCode ?? 0
        resolve(status >= 200 && status < 400)
      })
      req.once('timeout', () => { req.destroy() })
      req.once('error', () => { resolve(false) })
      req.end()
    })
  }
}
