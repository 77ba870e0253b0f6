import { existsSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { filesUnder, relativeImports } from '../helpers/source-tree.ts'

// Every file of the runs feature's stages, routes and runner is tested alone (docs/architecture.md,
// "The request path"): some test file imports it and starts no whole sidecar (no harness, no
// sidecar process, no runs setup around one).

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const FOLDERS = ['src/runs/stages', 'src/runs/routes', 'src/runs/runner']
/** Helpers that start a whole sidecar: a test importing one is not a unit test. */
const WHOLE_SIDECAR = /helpers\/(sidecar-harness|sidecar-process|runs-setup|runs-client|held-run-fleet)\.ts$/

/** Files below `dir` (from the repository's root) ending with `ending`, named from the root. */
const filesOf = (dir: string, ending: string): string[] => filesUnder(join(ROOT, dir), ending).map(file => relative(ROOT, file))

/** What a test file imports, directly or through the test's own kits (files under test/ that are not tests). */
function importsOf (file: string, seen = new Set<string>()): Set<string> {
  if (seen.has(file)) return seen
  seen.add(file)
  for (const imported of relativeImports(join(ROOT, file))) {
    const target = relative(ROOT, imported)
    // a kit of the test's own is followed (an import written in a string for a child process is no file here)
    if (target.startsWith('test/') && !target.endsWith('.test.ts') && !WHOLE_SIDECAR.test(target) && existsSync(join(ROOT, target))) importsOf(target, seen)
    else seen.add(target)
  }
  return seen
}

t.test('every file of runs/stages, runs/routes and runs/runner is imported by a unit test', async t => {
  const units = filesOf('test', '.test.ts')
    .map(file => importsOf(file))
    .filter(imports => ![...imports].some(target => WHOLE_SIDECAR.test(target)))
  t.ok(units.length > 20, `${units.length} unit test files`)
  const sources = FOLDERS.flatMap(dir => filesOf(dir, '.ts'))
  t.ok(sources.length >= 12, `${sources.length} files under ${FOLDERS.join(', ')}`)
  const untested = sources.filter(source => !units.some(imports => imports.has(source)))
  t.same(untested, [], 'files no unit test imports')
})
