import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { reapOnExit } from '../helpers/child-reaper.ts'

// The lint (`npm run lint`, eslint.config.js) as one file of the suite: it then runs beside the
// other files instead of before them all, on a core they leave idle while they wait for events.
const ROOT = fileURLToPath(new URL('../../', import.meta.url))

// type-aware lint of the whole tree: 40 CPU-seconds, which a machine loaded by two suites at four
// files each gave it over 5 minutes
t.setTimeout(1_200_000)

t.test('eslint finds nothing in src, test and bench (no warnings either)', async t => {
  // PATH only: no tap loaders (NODE_OPTIONS) and no coverage of eslint itself
  const lint = reapOnExit(spawn(process.execPath, ['node_modules/eslint/bin/eslint.js', '--max-warnings', '0', 'src', 'test', 'bench'], {
    cwd: ROOT, env: { PATH: process.env.PATH ?? '' }, stdio: ['ignore', 'pipe', 'pipe']
  }))
  let output = ''
  lint.stdout.setEncoding('utf8').on('data', (text: string) => { output += text })
  lint.stderr.setEncoding('utf8').on('data', (text: string) => { output += text })
  const code = await new Promise<number | string>(resolve => { lint.once('exit', (code, signal) => { resolve(code ?? signal ?? -1) }) })
  t.equal(code, 0, 'eslint exits 0', { output })
  t.equal(output, '', 'and prints nothing')
})
