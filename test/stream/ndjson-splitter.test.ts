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

t.test('a bound: no more than it is kept while a line\'s end is looked for', async t => {
  const MAX = 4 * 1024 * 1024
  const splitter = new NdjsonSplitter(MAX)
  const lines: string[] = []
  const megabyte = Buffer.alloc(1024 * 1024, 'x')
  t.ok(splitter.push(Buffer.from('{"n":1}\n"'), line => lines.push(line)))
  for (let i = 0; i < 4; i++) t.ok(splitter.push(megabyte, line => lines.push(line)), `MiB ${i + 1}: within the bound (and one byte, for a CR)`)
  t.equal(splitter.pendingBytes, MAX + 1)
  t.notOk(splitter.push(megabyte, line => lines.push(line)), 'the fifth MiB passes the bound')
  t.equal(splitter.pendingBytes, 0, 'nothing kept once it is passed')
  for (let i = 0; i < 300; i++) if (splitter.push(megabyte, line => lines.push(line))) t.fail('accepted after the bound')
  t.equal(splitter.pendingBytes, 0, 'nor after 300 MiB more')
  t.notOk(splitter.push(Buffer.from('"\n{"n":2}\n'), line => lines.push(line)), 'the line\'s end and later lines are not split')
  t.notOk(splitter.flush(line => lines.push(line)))
  t.same(lines, ['{"n":1}'])
})
