// The one body-limit reader: the sidecar streams a chunked request body to the app through it,
// the store reads a JSON body whole through it, the sidecar reads the key set and revocation list.

/** Yields a body's chunks; throws `tooLarge()` as soon as more than `maxBytes` have arrived. */
export async function * limitedBody (body: AsyncIterable<unknown>, maxBytes: number, tooLarge: () => Error): AsyncGenerator<Buffer> {
  let seen = 0
  for await (const chunk of body) {
    seen += (chunk as Buffer).length
    if (seen > maxBytes) throw tooLarge()
    yield chunk as Buffer
  }
}
