import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { filesUnder } from '../helpers/source-tree.ts'

// The layout docs/architecture.md draws: one home per feature, small files, one meaning per name.

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))

const files = filesUnder(SRC)
const EXPORTED = /^export (?:declare )?(?:abstract )?(?:class|interface|type|enum|const|let|function|async function) ([A-Za-z0-9_$]+)/gm

t.test('the scan sees the tree', async t => {
  t.ok(files.length > 100, `${files.length} files`)
})

t.test('no file of src/ is over 400 lines', async t => {
  const long = files
    .map(file => ({ file: relative(SRC, file), lines: readFileSync(file, 'utf8').split('\n').length }))
    .filter(({ lines }) => lines > 400)
  t.same(long, [])
})

t.test('no exported name is declared twice in src/', async t => {
  const places = new Map<string, string[]>()
  for (const file of files) {
    for (const match of readFileSync(file, 'utf8').matchAll(EXPORTED)) {
      const name = match[1] as string
      places.set(name, [...places.get(name) ?? [], relative(SRC, file)])
    }
  }
  t.ok(places.size > 200, `${places.size} exported names`)
  t.same([...places].filter(([, where]) => where.length > 1), [])
})

t.test('src/sidecar/ has at most 20 entries at its top level, and none of the runs feature', async t => {
  const top = readdirSync(join(SRC, 'sidecar'))
  t.ok(top.length <= 20, `${top.length}: ${top.join(', ')}`)
  t.same(top.filter(name => /run|idempot|durable/.test(name)), [])
})

t.test('no test fixture ships in src/', async t => {
  t.same(files.filter(file => /token-issuer|fixture/.test(file)).map(file => relative(SRC, file)), [])
})
