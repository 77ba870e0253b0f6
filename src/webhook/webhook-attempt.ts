import type { Dispatcher, Pool } from 'undici'

/** Something that can be cut short (an attempt): whoever waits on it registers one hook at a time. */
export interface Cuttable {
  readonly isCut: boolean
  readonly reason: unknown
  /** `hook` runs once when it is cut; `undefined` unregisters it. */
  whenCut: (hook: (() => void) | undefined) => void
}

/** What an attempt sends: one POST. */
export interface AttemptRequest {
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: string
}

/**
 * One webhook attempt: cut by its time limit or by the sender's shutdown, and, once it has its
 * turn, its one request as an undici dispatch handler (no response stream: the receiver's body is
 * read and dropped). Not an AbortController: an AbortSignal is an EventTarget, and making one and
 * listening on it cost more CPU per delivery than the attempt's own code.
 */
export class WebhookAttempt implements Cuttable, Dispatcher.DispatchHandler {
  reason: unknown = undefined
  /** Cut by its time limit. */
  timedOut = false
  #isCut = false
  #hook: (() => void) | undefined
  readonly #timer: NodeJS.Timeout
  #controller: Dispatcher.DispatchController | undefined
  #release: (() => void) | undefined
  #resolve: ((status: number) => void) | undefined
  #reject: ((error: unknown) => void) | undefined
  #status = 0

  constructor (timeoutMs: number) {
    this.#timer = setTimeout(() => {
      this.timedOut = true
      this.cut(new Error('webhook attempt timed out'))
    }, timeoutMs)
  }

  get isCut (): boolean { return this.#isCut }

  whenCut (hook: (() => void) | undefined): void { this.#hook = hook }

  /** Cuts it short (once): a wait for a turn gives up, a request in flight is aborted. */
  cut (reason: unknown): void {
    if (this.#isCut) return
    this.#isCut = true
    this.reason = reason
    const hook = this.#hook
    this.#hook = undefined
    hook?.()
  }

  /** The attempt is over: its time limit no longer runs. */
  end (): void { clearTimeout(this.#timer) }

  /**
   * Sends the request through `pool`: the status once the response is over, or the failure, or
   * the cut's reason as soon as it is cut (undici starts an aborted request only once it reaches a
   * connection, and a connect may take the whole connect timeout). `release` is called once undici
   * is done with the request (the turn is held as long as the connection is), not before.
   */
  async send (pool: Pool, release: () => void, request: AttemptRequest): Promise<number> {
    return await new Promise<number>((resolve, reject) => {
      this.#release = release
      this.#resolve = resolve
      this.#reject = reject
      this.#hook = this.#abandon
      pool.dispatch({ path: request.path, method: 'POST', headers: request.headers, body: request.body }, this)
    })
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#isCut) controller.abort(this.reason as Error)
  }

  onResponseStart (_controller: Dispatcher.DispatchController, status: number): void { this.#status = status }

  onResponseData (): void {}

  onResponseEnd (): void { this.#done(undefined) }

  onResponseError (_controller: Dispatcher.DispatchController, error: Error): void { this.#done(error) }

  readonly #abandon = (): void => {
    this.#controller?.abort(this.reason as Error)
    this.#settle(this.reason)
  }

  #done (error: Error | undefined): void {
    this.#hook = undefined
    this.#release?.()
    this.#settle(error)
  }

  #settle (error: unknown): void {
    const resolve = this.#resolve
    const reject = this.#reject
    if (resolve === undefined || reject === undefined) return
    this.#resolve = undefined
    this.#reject = undefined
    if (error === undefined) resolve(this.#status)
    else reject(error)
  }
}
