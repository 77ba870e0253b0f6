import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import t from 'tap'
import { reapOnExit } from '../helpers/child-reaper.ts'
import { eventually } from '../helpers/sidecar-harness.ts'

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
