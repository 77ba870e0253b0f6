import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { filesUnder, relativeImports } from '../helpers/source-tree.ts'

// Imports run one way, down this list (docs/architecture.md, "Layout"): a folder of src/ (or a
// file at its top) imports only from folders of lower layers, or from itself. Two folders of one
// layer never import each other, and no chain of imports between files comes back to where it began.

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))

const LAYERS: Readonly<Record<string, number>> = {
  'errors.ts': 0,
  shared: 1,
  config: 2,
  stream: 3,
  webhook: 3,
  auth: 3,
  lifecycle: 3,
  tracing: 3,
  metrics: 4,
  'build-store': 4,
  call: 5,
  respond: 6,
  runs: 7,
  sidecar: 8,
  demo: 9,
  bin: 9,
  'index.ts': 9
}

/** Edges the layers allow that a rule still forbids, with the reason. */
const FORBIDDEN: ReadonlyArray<[RegExp, RegExp, string]> = [
  [/^build-store\//, /^config\/sidecar-config\.ts$/, 'the build store does not read the sidecar\'s configuration']
]

/** The top-level folder (or file) of `src/` that a path belongs to. */
const unitOf = (path: string): string => relative(SRC, path).split('/')[0] as string

interface Edge { from: string, to: string }

const files = filesUnder(SRC)
const edges: Edge[] = files.flatMap(file => relativeImports(file).map(target => ({ from: relative(SRC, file), to: relative(SRC, target) })))

t.test('every folder of src/ has a layer', async t => {
  const units = new Set(files.map(file => unitOf(file)))
  for (const unit of units) t.not(LAYERS[unit], undefined, `${unit} has a layer`)
})

t.test('the scan sees the imports (it would pass vacuously otherwise)', async t => {
  t.ok(edges.length > 100, `${edges.length} relative imports`)
  t.ok(edges.some(edge => edge.from === 'sidecar/invoke-pipeline.ts' && edge.to === 'call/match-route.ts'))
  t.ok(edges.some(edge => edge.from === 'runs/store/open-run-store.ts' && edge.to === 'runs/store/redis/redis-run-store.ts'), 'import(…) is seen')
  t.ok(edges.some(edge => edge.from.startsWith('bin/') && edge.to.startsWith('sidecar/')))
})

t.test('every import names a file that exists', async t => {
  const known = new Set(files.map(file => relative(SRC, file)))
  t.same(edges.filter(edge => !known.has(edge.to)).map(({ from, to }) => `${from} → ${to}`), [])
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

/** Every cycle's first file and the way back to it, found by a depth-first walk. */
function cycles (graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const found: string[][] = []
  const state = new Map<string, 'open' | 'done'>()
  const path: string[] = []
  const walk = (file: string): void => {
    state.set(file, 'open')
    path.push(file)
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') found.push([...path.slice(path.indexOf(next)), next])
      else if (state.get(next) === undefined) walk(next)
    }
    path.pop()
    state.set(file, 'done')
  }
  for (const file of graph.keys()) if (state.get(file) === undefined) walk(file)
  return found
}

t.test('no chain of imports between files comes back to its start', async t => {
  const graph = new Map<string, string[]>()
  for (const { from, to } of edges) graph.set(from, [...graph.get(from) ?? [], to])
  t.same(cycles(graph).map(cycle => cycle.join(' → ')), [])
  t.same(cycles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']]])), [['a', 'b', 'c', 'a']], 'the walk finds a cycle')
})
