import type { Logger } from 'pino'
import type { Pool } from 'undici'
import type { AppCancelOutcome, LabelledCounter } from '../shared/metric-contracts.ts'

/** Tells the app a run it was working on was aborted (APP_CANCEL_PATH); called once per aborted app request. */
export type CancelAtApp = (runId: string) => void

export interface AppCancelDeps {
  readonly app: Pool
  /** APP_URL's path, without a trailing slash ('' for none): the cancel path goes under it, as forwarded calls do. */
  readonly basePath: string
  /** APP_CANCEL_PATH, `{run_id}` standing for the run id. */
  readonly path: string
  readonly logger: Logger
  readonly requests: LabelledCounter<AppCancelOutcome>
}

/** Longest wait for the app's answer to a cancel POST: the app request it names is gone already. */
const ANSWER_TIMEOUT_MS = 10_000

const RUN_ID = /\{run_id\}/g

/**
 * APP_CANCEL_PATH: an app whose work outlives its connection (a GPU job, a Cog predictor) is told
 * to stop too. `POST <APP_URL><path>` with `X-Request-Id: <run_id>`, sent at once; a failure is
 * logged and counted, never the caller's concern. `settled` lets the drain wait for the last ones.
 */
export class AppCancel {
  readonly #deps: AppCancelDeps
  readonly #pending = new Set<Promise<void>>()

  constructor (deps: AppCancelDeps) {
    this.#deps = deps
  }

  readonly send: CancelAtApp = runId => {
    const sending = this.#post(runId)
    this.#pending.add(sending)
    void sending.finally(() => { this.#pending.delete(sending) })
  }

  /** Resolves once `callsClosed` and then the cancel POSTs sent meanwhile have ended, or after `ms` in all. */
  async settled (callsClosed: Promise<void>, ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    const over = new Promise<void>(resolve => { timer = setTimeout(resolve, ms) })
    // a cut call hears of its closed connection only when its socket's handle has closed: its POST starts then
    await Promise.race([callsClosed, over])
    await Promise.race([Promise.all(this.#pending), over])
    clearTimeout(timer)
  }

  async #post (runId: string): Promise<void> {
    const { app, basePath, path, logger, requests } = this.#deps
    const target = basePath + path.replace(RUN_ID, runId)
    try {
      const status = await postAndDiscard(app, target, runId)
      if (status >= 200 && status < 300) {
        requests.labels('sent').inc()
        return
      }
      requests.labels('failed').inc()
      logger.warn({ runId, path: target, status }, 'app cancel request refused')
    } catch (error) {
      requests.labels('failed').inc()
      logger.warn({ runId, path: target, err: error }, 'app cancel request failed')
    }
  }
}

/** POSTs `path` with no body and `X-Request-Id`: the app's status, its body read and dropped; rejects on a network error or after ANSWER_TIMEOUT_MS. */
async function postAndDiscard (app: Pool, path: string, runId: string): Promise<number> {
  return await new Promise((resolve, reject) => {
    let status = 0
    app.dispatch({
      method: 'POST', path, headers: { 'x-request-id': runId, 'content-length': '0' }, body: null,
      headersTimeout: ANSWER_TIMEOUT_MS, bodyTimeout: ANSWER_TIMEOUT_MS
    }, {
      onRequestStart () {},
      onResponseStart (_controller, statusCode) { status = statusCode },
      onResponseData () {},
      onResponseEnd () { resolve(status) },
      onResponseError (_controller, error) { reject(error) }
    })
  })
}
