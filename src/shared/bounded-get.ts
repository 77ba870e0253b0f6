import type { Dispatcher } from 'undici'
import { Agent } from './undici-core.ts'

export interface BoundedGetOptions {
  /** Largest body accepted: a larger Content-Length is refused before any body is read, a longer body cut off. */
  readonly maxBytes: number
  /** Deadline for the whole exchange, headers and body (a server trickling bytes cannot hold it longer). */
  readonly timeoutMs: number
  readonly headers?: Record<string, string>
}

export interface BoundedResponse {
  readonly status: number
  readonly body: Buffer
}

/** The agent of these few GETs (keys, revocations, build settings), made when first needed. */
let agent: Dispatcher | undefined

/**
 * GETs `url` over undici's dispatch and holds at most `maxBytes` of its body. Rejects with the
 * network error (its `code` kept), on the deadline, or when the body is over the limit (the
 * connection is then cut, so the sender is not left writing to nobody).
 */
export async function boundedGet (url: URL, options: BoundedGetOptions): Promise<BoundedResponse> {
  agent ??= new Agent()
  return await new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    let status = 0
    let controller: Dispatcher.DispatchController | undefined
    let failure: Error | undefined
    const fail = (error: Error): void => {
      failure ??= error
      controller?.abort(error)
    }
    const timer = setTimeout(() => { fail(new Error(`${url.href} did not answer within ${options.timeoutMs} ms`)) }, options.timeoutMs)
    const tooLarge = (what: string): Error => new Error(`${url.href} ${what}, more than ${options.maxBytes} bytes`)
    ;(agent as Dispatcher).dispatch({
      origin: url.origin,
      path: url.pathname + url.search,
      method: 'GET',
      headers: options.headers ?? {},
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs
    }, {
      onRequestStart (requestController) {
        controller = requestController
        if (failure !== undefined) requestController.abort(failure)
      },
      onResponseStart (_controller, statusCode, responseHeaders) {
        status = statusCode
        const declared = responseHeaders['content-length']
        if (typeof declared === 'string' && Number(declared) > options.maxBytes) fail(tooLarge(`declared ${declared} bytes`))
      },
      onResponseData (_controller, chunk) {
        size += chunk.length
        if (size > options.maxBytes) fail(tooLarge('sent more'))
        else chunks.push(chunk)
      },
      onResponseEnd () {
        clearTimeout(timer)
        resolve({ status, body: Buffer.concat(chunks, size) })
      },
      onResponseError (_controller, error) {
        clearTimeout(timer)
        reject(failure ?? error)
      }
    })
  })
}
