import { request } from 'undici'
import { limitedBody } from '../shared/body-limit.ts'

export interface BoundedJsonOptions {
  /** Largest body accepted; a larger one is refused without being buffered. */
  maxBytes: number
  /** Deadline for the whole exchange, headers and body (a store trickling bytes cannot hold it longer). */
  timeoutMs: number
}

/**
 * GETs `url` and parses its 200 body as JSON, holding at most `maxBytes` of it: a larger
 * Content-Length is refused before any body is read, and a body that grows past the cap is cut
 * off (its connection closed). Rejects on any other status, a timeout, a reset, or a body that
 * is not JSON.
 */
export async function fetchBoundedJson (url: URL, options: BoundedJsonOptions): Promise<unknown> {
  const response = await request(url, {
    headers: { accept: 'application/json' },
    signal: AbortSignal.timeout(options.timeoutMs)
  })
  const { body } = response
  body.on('error', ignore) // the abort error of a body cut short below; reading reports real errors itself
  try {
    if (response.statusCode !== 200) throw new Error(`${url.href} answered ${response.statusCode}`)
    const declared = response.headers['content-length']
    if (typeof declared === 'string' && Number(declared) > options.maxBytes) {
      throw new Error(`${url.href} declared ${declared} bytes, more than ${options.maxBytes}`)
    }
    const chunks: Buffer[] = []
    const tooLarge = (): Error => new Error(`${url.href} sent more than ${options.maxBytes} bytes`)
    for await (const chunk of limitedBody(body, options.maxBytes, tooLarge)) chunks.push(chunk)
    return JSON.parse(Buffer.concat(chunks).toString('utf8'))
  } finally {
    // a body left unread would keep its connection (and the sender) busy: cut it instead
    if (!body.readableEnded) body.destroy()
  }
}

function ignore (): void {}
