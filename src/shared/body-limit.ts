import type { IncomingMessage } from 'node:http'

// The one body-limit reader of both programs: the sidecar streams a chunked body to the app
// through it, the store reads a JSON body whole through it.

/** Yields the request body's chunks; throws `tooLarge()` as soon as more than `maxBytes` have arrived. */
export async function * limitedBody (req: IncomingMessage, maxBytes: number, tooLarge: () => Error): AsyncGenerator<Buffer> {
  let seen = 0
  for await (const chunk of req) {
    seen += (chunk as Buffer).length
    if (seen > maxBytes) throw tooLarge()
    yield chunk as Buffer
  }
}
