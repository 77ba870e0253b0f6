import fc from 'fast-check'
import t from 'tap'
import { createEventSplitter, type StreamKind } from '../../src/stream/event-splitter.ts'

/** The values `kind` splits `chunks` into, fed one push per chunk, then end(). */
function split (kind: StreamKind, chunks: Array<string | Buffer>, end = true): string[] {
  const values: string[] = []
  const splitter = createEventSplitter(kind, data => { values.push(data) }, Infinity)
  for (const chunk of chunks) splitter.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk)
  if (end) splitter.end()
  return values
}

/** `text` as UTF-8 bytes cut at every offset in `cuts`. */
function cutAt (text: string, cuts: number[]): Buffer[] {
  const bytes = Buffer.from(text)
  const points = [...new Set(cuts.map(c => Math.min(c, bytes.length)))].sort((a, b) => a - b)
  const out: Buffer[] = []
  let from = 0
  for (const point of points) {
    out.push(bytes.subarray(from, point))
    from = point
  }
  out.push(bytes.subarray(from))
  return out
}

t.test('event-stream: the data of each event, as the WHATWG parser reads it', async t => {
  t.same(split('event-stream', ['data: a\n\ndata: {"b":1}\n\n']), ['a', '{"b":1}'])
  t.same(split('event-stream', ['data: one\ndata: two\n\n']), ['one\ntwo'], 'several data lines: one value with line breaks')
  t.same(split('event-stream', ['data:x\n\ndata:  y\n\n']), ['x', ' y'], 'one space after the colon is dropped, no more')
  t.same(split('event-stream', ['data: crlf\r\n\r\ndata: cr\r\rdata: lf\n\n']), ['crlf', 'cr', 'lf'], 'CRLF, CR and LF end lines')
  t.same(split('event-stream', [': comment\n\nevent: tick\nid: 4\nretry: 10\ndata: v\n\n']), ['v'], 'comments, event, id and retry are not values')
  t.same(split('event-stream', ['event: empty\n\nid: 5\n\n']), [], 'an event without data is not dispatched')
  t.same(split('event-stream', ['data\n\ndata:\n\n']), ['', ''], 'an empty data field is an empty value')
  t.same(split('event-stream', ['data: a\n\ndata: unfinished']), ['a'], 'an event the stream never finished is dropped at the end (WHATWG)')
  t.same(split('event-stream', ['data: a\n']), [], 'a data line without its blank line is not an event yet')
  t.same(split('event-stream', ['\ufeffdata: a\n\n\ufeffdata: b\n\n']), ['a'], 'a byte order mark starts the stream and is skipped; later, it is part of a field name')
  t.same(split('event-stream', [Buffer.from([0xef]), Buffer.from([0xbb, 0xbf]), 'data: a\n\n']), ['a'], 'a byte order mark cut between reads')
  t.same(split('event-stream', ['', '\ufeffdata: a\n\n']), ['a'], 'an empty first read does not use up the start')
})

t.test('event-stream: the same values however the bytes are cut, UTF-8 characters included', async t => {
  const body = 'data: héllo 🌍\n\nevent: x\ndata: {"k":"日本"}\ndata: 2\r\n\r\n: c\n\ndata: end\n\n'
  const whole = split('event-stream', [body])
  t.same(whole, ['héllo 🌍', '{"k":"日本"}\n2', 'end'])
  const length = Buffer.byteLength(body)
  for (let at = 0; at <= length; at++) {
    const values = split('event-stream', cutAt(body, [at]))
    if (JSON.stringify(values) !== JSON.stringify(whole)) t.fail(`cut at byte ${at}: ${JSON.stringify(values)}`)
  }
  t.same(split('event-stream', [...Buffer.from(body)].map(byte => Buffer.from([byte]))), whole, 'one byte at a time')
})

t.test('ndjson: each non-empty line, whitespace-only lines skipped, CRLF trimmed, the last line without a newline kept at the end', async t => {
  t.same(split('ndjson', ['{"a":1}\n', 'text\r\n', '\n', '   \n', '\t\n', '3']), ['{"a":1}', 'text', '3'])
  t.same(split('ndjson', ['{"a":', '1}\n{"b"', ':2}\n']), ['{"a":1}', '{"b":2}'], 'lines over several reads')
  t.same(split('ndjson', ['last'], false), [], 'a last line waits for the end')
  t.same(split('ndjson', ['last']), ['last'])
  t.same(split('ndjson', [' padded \n']), [' padded '], 'a line is kept as it is')
  t.same(split('ndjson', []), [])
})

t.test('ndjson: the same values however the bytes are cut', async () => {
  fc.assert(fc.property(
    fc.array(fc.string({ unit: 'grapheme' }).filter(s => !/[\r\n]/.test(s) && s.trim() !== ''), { maxLength: 8 }),
    fc.array(fc.nat(400), { maxLength: 6 }),
    (lines, cuts) => {
      const body = lines.map(line => line + '\n').join('')
      const values = split('ndjson', cutAt(body, cuts))
      return JSON.stringify(values) === JSON.stringify(lines)
    }
  ))
})

t.test('chunks: each read is one value, as text; a character cut between reads joins the later one', async t => {
  t.same(split('chunks', ['a', 'bc', 'line\nbreak']), ['a', 'bc', 'line\nbreak'])
  t.same(split('chunks', ['', 'x', Buffer.alloc(0)]), ['x'], 'an empty read is no value')
  const euro = Buffer.from('€') // three bytes
  t.same(split('chunks', [Buffer.concat([Buffer.from('a'), euro.subarray(0, 1)]), euro.subarray(1)]), ['a', '€'])
  t.same(split('chunks', [euro.subarray(0, 1), euro.subarray(1, 2), euro.subarray(2)]), ['€'], 'reads holding only part of a character wait for the rest')
  t.same(split('chunks', [Buffer.concat([Buffer.from('z'), euro.subarray(0, 2)])]), ['z', '\ufffd'], 'a character cut by the end becomes U+FFFD')
})

t.test('STREAM_MAX_EVENT_BYTES: an event longer than the bound stops the splitting, in every row but chunks', async t => {
  const MAX = 1000
  /** The values, and whether each push was accepted. */
  const bounded = (kind: StreamKind, chunks: Array<string | Buffer>): { values: string[], accepted: boolean[] } => {
    const values: string[] = []
    const splitter = createEventSplitter(kind, data => { values.push(data) }, MAX)
    const accepted = chunks.map(chunk => splitter.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk))
    splitter.end()
    return { values, accepted }
  }
  const x = (n: number): string => 'x'.repeat(n)
  t.same(bounded('ndjson', [`${x(MAX)}\n`, `${x(MAX)}\r\n`, 'a\n']), { values: [x(MAX), x(MAX), 'a'], accepted: [true, true, true] }, 'a line of the bound passes, LF or CRLF')
  t.same(bounded('ndjson', ['a\n' + x(MAX + 1) + '\nb\n', 'c\n']), { values: ['a'], accepted: [false, false] }, 'one byte more: the lines before it only')
  t.same(bounded('ndjson', [x(600), x(400), 'y', '\nz\n']), { values: [], accepted: [true, true, true, false] }, 'over several reads: one byte past the bound may be a CR')
  t.same(bounded('ndjson', [x(600), x(400), 'yy', '\nz\n']), { values: [], accepted: [true, true, false, false] }, 'two are not: refused before the line\'s end')
  t.same(bounded('ndjson', [x(600), x(400), '\r', '\n']), { values: [x(MAX)], accepted: [true, true, true, true] }, 'the CR of a CRLF is not the line\'s')

  const event = (n: number): string => `data: ${x(n - 8)}\n\n` // n bytes in all
  t.same(bounded('event-stream', [event(MAX), event(MAX)]), { values: [x(MAX - 8), x(MAX - 8)], accepted: [true, true] }, 'events of the bound pass')
  t.same(bounded('event-stream', ['data: a\n\n', `data: ${x(600)}\n`, `data: ${x(600)}\n`, '\n']), { values: ['a'], accepted: [true, true, false, false] },
    'an event of several data lines is counted whole')
  t.same(bounded('event-stream', [`data: ${x(500)}\r\n\r\n`, `data: ${x(500)}\r\r`, `data: ${x(500)}\n`, '\ndata: b\n\n']).accepted, [true, true, true, true],
    'every blank line ends the count: CRLF CRLF, CR CR, and LF LF cut between reads')
  const comments = Array.from({ length: 20 }, () => ': keep-alive\n\n')
  t.same(bounded('event-stream', [...comments, ...comments, event(20)]).values, [x(12)], 'comments between events count for nothing')

  t.same(bounded('event-stream', [`data: ${x(600)}`, `${x(400)}\n\ndata: b\n\n`]), { values: [], accepted: [true, false] },
    'an event whose end is in the read that passes the bound is refused there, with the events after it')
  t.same(bounded('event-stream', [`data: ${x(600)}`, `${x(391)}\n\ndata: b\n\n`]), { values: [x(991), 'b'], accepted: [true, true] },
    'one of the bound whose end is there passes')
  t.same(bounded('event-stream', [`data: a\n\n${event(MAX + 1)}data: b\n\n`]), { values: [], accepted: [false] },
    'an event wholly inside a read larger than the bound is refused too')
  t.same(bounded('event-stream', [`data: a\n\n${event(MAX)}data: b\n\n`]).values, ['a', x(MAX - 8), 'b'], 'one of the bound there passes')

  t.same(bounded('chunks', [x(MAX + 500)]), { values: [x(MAX + 500)], accepted: [true] }, 'a chunk is never assembled: one read is one value')
})
