import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

// Imports run one way: bin → sidecar (wiring, pipeline, websocket) → runs → sidecar/respond →
// sidecar/call → sidecar/metrics, store → stream, webhook, auth, lifecycle, tracing → config →
// shared contracts (errors, answers, metric interfaces). The runs feature sits between the call's
// building blocks (which its routes, stages and runner use) and the pipeline that composes them.
// A unit imports only from lower layers (or itself); two units of one layer never import each other.

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))

const LAYERS: Readonly<Record<string, number>> = {
  shared: 0,
  config: 1,
  stream: 2,
  webhook: 2,
  auth: 2,
  lifecycle: 2,
  tracing: 2,
  store: 3,
  'sidecar/metrics': 3,
  'sidecar/call': 4,
  'sidecar/respond': 5,
  runs: 6,
  'sidecar/websocket': 7,
  sidecar: 8,
  demo: 9,
  bin: 9,
  'index.ts': 9
}

/** Edges the layers allow that a rule still forbids, with the reason. */
const FORBIDDEN: ReadonlyArray<[RegExp, RegExp, string]> = [
  [/^store\//, /^config\/sidecar-config\.ts$/, 'the build store does not read the sidecar\'s configuration']
]

function sourceFiles (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(path)
    return entry.name.endsWith('.ts') ? [path] : []
  })
}

/** Top-level files of `src/` that belong to a folder's layer. */
const FILES_OF: Readonly<Record<string, string>> = { 'errors.ts': 'shared' }

/** The top-level folder (or file) of `src/` that a path belongs to; `sidecar/`'s sub-folders are units of their own. */
const unitOf = (path: string): string => {
  const [top, sub, file] = relative(SRC, path).split('/') as [string, string | undefined, string | undefined]
  if (top === 'sidecar' && file !== undefined) return `sidecar/${sub as string}`
  return FILES_OF[top] ?? top
}

const IMPORT = /^\s*(?:import|export)\s[^'"]*?from\s+['"](\.[^'"]+)['"]/gm

interface Edge { from: string, to: string }

const edges: Edge[] = sourceFiles(SRC).flatMap(file => {
  const text = readFileSync(file, 'utf8')
  return [...text.matchAll(IMPORT)].map(match => ({
    from: relative(SRC, file),
    to: relative(SRC, resolve(dirname(file), match[1] as string))
  }))
})

t.test('every folder of src/ has a layer', async t => {
  const units = new Set(sourceFiles(SRC).map(file => unitOf(file)))
  for (const unit of units) t.not(LAYERS[unit], undefined, `${unit} has a layer`)
})

t.test('the scan sees the imports (it would pass vacuously otherwise)', async t => {
  t.ok(edges.length > 100, `${edges.length} relative imports`)
  t.ok(edges.some(edge => edge.from === 'sidecar/invoke-pipeline.ts' && edge.to === 'sidecar/call/match-route.ts'))
  t.ok(edges.some(edge => edge.from.startsWith('bin/') && edge.to.startsWith('sidecar/')))
})

t.test('no import runs upward or sideways', async t => {
  const wrong = edges.filter(({ from, to }) => {
    const a = unitOf(join(SRC, from))
    const b = unitOf(join(SRC, to))
    if (a === b) return false
    return (LAYERS[b] as number) >= (LAYERS[a] as number)
  }).map(({ from, to }) => `${from} → ${to}`)
  t.same(wrong, [], 'imports that go up or across a layer')
})

t.test('edges the layers allow but a rule forbids', async t => {
  for (const [from, to, why] of FORBIDDEN) {
    const found = edges.filter(edge => from.test(edge.from) && to.test(edge.to)).map(edge => `${edge.from} → ${edge.to}`)
    t.same(found, [], why)
  }
})
