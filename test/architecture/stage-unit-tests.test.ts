import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

// Every file of the runs feature's stages, routes and runner is tested alone (docs/architecture.md,
// "The request path"): some test file imports it and starts no whole sidecar (no harness, no
// sidecar process, no runs setup around one).

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const FOLDERS = ['src/runs/stages', 'src/runs/routes', 'src/runs/runner']
/** Helpers that start a whole sidecar: a test importing one is not a unit test. */
const WHOLE_SIDECAR = /helpers\/(sidecar-harness|sidecar-process|runs-setup|runs-client|held-run-fleet)\.ts$/

function filesUnder (dir: string, ending: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap(entry => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return filesUnder(path, ending)
    return entry.name.endsWith(ending) ? [path] : []
  })
}

const IMPORT = /(?:^\s*(?:import|export)\s[^'"]*?from\s+|\bimport\()['"](\.[^'"]+)['"]/gm

/** What a test file imports, directly or through the test's own kits (files under test/ that are not tests). */
function importsOf (file: string, seen = new Set<string>()): Set<string> {
  if (seen.has(file)) return seen
  seen.add(file)
  for (const match of readFileSync(join(ROOT, file), 'utf8').matchAll(IMPORT)) {
    const target = relative(ROOT, resolve(dirname(join(ROOT, file)), match[1] as string))
    // a kit of the test's own is followed (an import written in a string for a child process is no file here)
    if (target.startsWith('test/') && !target.endsWith('.test.ts') && !WHOLE_SIDECAR.test(target) && existsSync(join(ROOT, target))) importsOf(target, seen)
    else seen.add(target)
  }
  return seen
}

t.test('every file of runs/stages, runs/routes and runs/runner is imported by a unit test', async t => {
  const units = filesUnder('test', '.test.ts')
    .map(file => importsOf(file))
    .filter(imports => ![...imports].some(target => WHOLE_SIDECAR.test(target)))
  t.ok(units.length > 20, `${units.length} unit test files`)
  const sources = FOLDERS.flatMap(dir => filesUnder(dir, '.ts'))
  t.ok(sources.length >= 14, `${sources.length} files under ${FOLDERS.join(', ')}`)
  const untested = sources.filter(source => !units.some(imports => imports.has(source)))
  t.same(untested, [], 'files no unit test imports')
})
