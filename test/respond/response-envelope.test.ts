import fc from 'fast-check'
import t from 'tap'
import { JsonSyntax } from '../../src/shared/json-syntax.ts'
import { resultJson } from '../../src/shared/run-result.ts'
import { envelopeParts, envelopeText } from '../../src/respond/response-envelope.ts'

// The envelope splices the app's bytes instead of parsing and re-serialising them: its result
// must be exactly what parsing would have given, however the body was cut into chunks, in both
// forms: the buffers of a large body and the one string of a small one.

function chunked (bytes: Buffer, cuts: number[]): Buffer[] {
  const chunks: Buffer[] = []
  let at = 0
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    if (cut > at && cut < bytes.length) { chunks.push(bytes.subarray(at, cut)); at = cut }
  }
  chunks.push(bytes.subarray(at))
  return chunks
}

function envelope (body: Buffer, cuts: number[] = []): string {
  const chunks = chunked(body, cuts)
  const syntax = new JsonSyntax()
  for (const chunk of chunks) syntax.push(chunk)
  const isJson = syntax.end()
  const parts = Buffer.concat(envelopeParts('run-1', chunks, isJson, 12.5, '2026-11-23T00:00:00.000Z')).toString('utf8')
  // the small-body form (one string) must be the same text
  const text = envelopeText('run-1', body, isJson, 12.5, '2026-11-23T00:00:00.000Z')
  return text === parts ? parts : `parts ${parts} != text ${text}`
}

/** The envelope text as the parse-and-stringify way made it. */
const reference = (text: string): string =>
  `{"run_id":"run-1","result":${resultJson(text)},"run_time_ms":12.5,"timestamp":"2026-11-23T00:00:00.000Z"}`

t.test('hand-picked bodies: the same bytes as parsing and stringifying', async t => {
  for (const text of ['{"a":1}', ' \n[1, 2]\t ', '"just a string"', '42', 'plain text', 'say "hi"\\ \u0001\u001f\n', 'é✓🌍', '', '  ', '{"a":', 'null']) {
    t.equal(envelope(Buffer.from(text)), reference(text), JSON.stringify(text))
    t.equal(envelope(Buffer.from(text), [1, 2, 3, 5, 8]), reference(text), `${JSON.stringify(text)} in chunks`)
  }
})

t.test('any JSON or text body, cut anywhere (even inside a character), gives the reference envelope', async () => {
  const space = fc.constantFrom('', ' ', '\n', '\t', '\r\n  ')
  const jsonBody = fc.tuple(space, fc.json(), space).map(([a, json, b]) => a + json + b)
  const textBody = fc.string({ unit: 'grapheme' })
  fc.assert(fc.property(fc.oneof(jsonBody, textBody), fc.array(fc.nat(300)), (text, cuts) => {
    return envelope(Buffer.from(text), cuts) === reference(text)
  }), { numRuns: 3000 })
})

t.test('a body that is not valid UTF-8 shows U+FFFD, as before', async t => {
  const body = Buffer.from([0x22, 0x61, 0xff, 0x62, 0x22]) // "a\xffb"
  const text = body.toString('utf8')
  t.equal(envelope(body), reference(text))
  t.equal(envelope(Buffer.from([0x61, 0xc3])), reference(Buffer.from([0x61, 0xc3]).toString('utf8')), 'cut mid-character at the end')
  t.equal(JSON.parse(envelope(body)).result, 'a\ufffdb')
})
