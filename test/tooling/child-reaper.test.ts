import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { reapOnExit } from '../helpers/child-reaper.ts'
import { eventually } from '../helpers/sidecar-harness.ts'
import { filesUnder } from '../helpers/source-tree.ts'

/** Whether `pid` is a process still running (a zombie waiting for its parent counts as gone). */
function running (pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') !== true
  } catch {
    return false
  }
}

t.test('a test that tap times out (SIGALRM, then SIGKILL) leaves none of the processes it started running', async t => {
  const hanging = reapOnExit(spawn(process.execPath, ['--import', 'tsx', 'test/helpers/fixtures/hanging-test.ts'], { stdio: ['ignore', 'pipe', 'inherit'] }))
  const [line] = await once(hanging.stdout, 'data') as [Buffer]
  const pid = Number(line.toString().trim())
  t.ok(pid > 0 && running(pid), 'the hanging test holds a running process')
  // what tap does at a test's time-out
  hanging.kill('SIGALRM')
  await eventually(() => !running(pid), 5000)
  t.notOk(running(pid), 'its process was killed with it')
  hanging.kill('SIGKILL')
  await once(hanging, 'exit')
})

t.test('every process a test or helper starts (asynchronously) is handed to reapOnExit as it is spawned', async t => {
  const TEST = fileURLToPath(new URL('../', import.meta.url))
  // spawn(, execFile(, fork(, exec( from node:child_process; their Sync forms block the test and end with it
  const START = /(?<![\w.])(spawn|execFile|fork|exec)\(/g
  const unreaped: string[] = []
  for (const file of [...filesUnder(TEST, '.ts'), ...filesUnder(TEST, '.mjs')]) {
    const text = readFileSync(file, 'utf8')
    if (!/from 'node:child_process'/.test(text)) continue
    for (const match of text.matchAll(START)) {
      const line = text.slice(text.lastIndexOf('\n', match.index) + 1, match.index)
      if (line.includes('//') || line.trimStart().startsWith('*')) continue // a comment
      if (!line.endsWith('reapOnExit(')) unreaped.push(`${relative(TEST, file)}:${text.slice(0, match.index).split('\n').length} ${match[1]}(`)
    }
  }
  t.same(unreaped, [], 'each wrapped: reapOnExit(spawn(…)) (and reapOnExit(…, true) for a detached one)')
})
