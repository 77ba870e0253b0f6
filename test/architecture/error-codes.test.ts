import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { filesUnder } from '../helpers/source-tree.ts'

// Every stable error code is declared in src/errors.ts, and docs/errors.md names each one.

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))
const ERRORS_DOC = fileURLToPath(new URL('../../docs/errors.md', import.meta.url))
const CODE = /'((?:SIDECAR|STORE|HTTP)_[A-Z_]+)'/g

const codesIn = (text: string): string[] => [...text.matchAll(CODE)].map(match => match[1] as string)

const declared = new Set(codesIn(readFileSync(join(SRC, 'errors.ts'), 'utf8')))

t.test('errors.ts declares the codes (the scan would pass vacuously otherwise)', async t => {
  t.ok(declared.size >= 35, `${declared.size} codes`)
  for (const code of ['SIDECAR_CALLER_GONE', 'SIDECAR_RUN_CANCELED', 'SIDECAR_REPLICA_STOPPED', 'SIDECAR_INTERNAL', 'HTTP_MALFORMED_REQUEST', 'STORE_INTERNAL']) {
    t.ok(declared.has(code), code)
  }
})

t.test('no error code is declared outside errors.ts', async t => {
  const elsewhere = filesUnder(SRC)
    .filter(file => !file.endsWith('/src/errors.ts'))
    .flatMap(file => codesIn(readFileSync(file, 'utf8')).map(code => `${file.slice(SRC.length)}: ${code}`))
    // the environment variables of the build store share the STORE_ prefix
    .filter(found => !/: STORE_(URL|TOKEN)$/.test(found))
  t.same(elsewhere, [])
})

t.test('docs/errors.md names every code', async t => {
  const doc = readFileSync(ERRORS_DOC, 'utf8')
  const missing = [...declared].filter(code => !doc.includes(`\`${code}\``))
  t.same(missing, [])
})
