import type { ChildProcess } from 'node:child_process'

// Processes a test starts die with it, however it ends: its last line, an exception, or tap's
// time-out, which sends SIGALRM (then SIGKILL 500 ms later, which nothing can catch) and would
// otherwise leave sidecars, apps and redis-servers running after the suite.

const children = new Set<ChildProcess>()
let installed = false
/** Children spawned detached: each leads its own process group. */
const groupLeaders = new WeakSet<ChildProcess>()

function killAll (): void {
  for (const child of children) {
    try {
      // a detached child leads its own process group: the group goes with it (chromium's helpers)
      if (child.pid !== undefined && groupLeaders.has(child)) process.kill(-child.pid, 'SIGKILL')
      else child.kill('SIGKILL')
    } catch {}
  }
  children.clear()
}

/** Kills `child` (SIGKILL) when this test process ends, unless it exited first; `group`: it was spawned detached, its whole group goes. */
export function reapOnExit<T extends ChildProcess> (child: T, group = false): T {
  if (group) groupLeaders.add(child)
  children.add(child)
  child.once('exit', () => { children.delete(child) })
  if (!installed) {
    installed = true
    process.once('exit', killAll)
    // tap's time-out: a listener keeps the signal from ending the process, which tap SIGKILLs next
    process.on('SIGALRM', killAll)
  }
  return child
}
