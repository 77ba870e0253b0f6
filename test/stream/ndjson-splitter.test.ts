import t from 'tap'
import { NdjsonSplitter } from '../../src/stream/ndjson-splitter.ts'

function split (chunks: Array<string | Buffer>): string[] {
  const lines: string[] = []
  const splitter = new NdjsonSplitter()
  for (const chunk of chunks) splitter.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk, line => lines.push(line))
  splitter.flush(line => lines.push(line))
  return lines
}

t.test('one record per line, reassembled across reads', async t => {
  t.same(split(['{"a":1}\n{"b"', ':2}\n', '{"c":3}\n']), ['{"a":1}', '{"b":2}', '{"c":3}'])
  t.same(split(['{"a"', ':', '1', '}', '\n']), ['{"a":1}'])
})

t.test('a final line without a newline still counts; flush twice adds nothing', async t => {
  const lines: string[] = []
  const splitter = new NdjsonSplitter()
  splitter.push(Buffer.from('1\n2'), line => lines.push(line))
  splitter.flush(line => lines.push(line))
  splitter.flush(line => lines.push(line))
  t.same(lines, ['1', '2'])
})

t.test('empty and whitespace-only lines are skipped; CRLF leaves no \\r behind', async t => {
  t.same(split(['\n\n  \n\t\n{"a":1}\r\n\r\n{"b":2}\r\n']), ['{"a":1}', '{"b":2}'])
})

t.test('a multibyte character split between reads survives', async t => {
  const bytes = Buffer.from('{"t":"é日本😀"}\n')
  const chunks = [...bytes].map(b => Buffer.from([b]))
  t.same(split(chunks), ['{"t":"é日本😀"}'])
})
