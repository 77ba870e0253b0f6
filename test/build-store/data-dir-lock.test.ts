import { execFileSync, spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { DataDirInUseError } from '../../src/errors.ts'
import { lockDataDir } from '../../src/build-store/data-dir-lock.ts'
import { built, type Child, runNode } from '../helpers/child-process.ts'
import { reapOnExit } from '../helpers/child-reaper.ts'

/** The module the child processes below lock with: the compiled one, as the build store runs it. */
const LOCK_MODULE = built('src/build-store/data-dir-lock.ts')

async function freshDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'data-dir-lock-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** Lock files are `build-store-<generation>.pid`; a stale one is taken over by the next generation. */
const FIRST = 'build-store-1.pid'
const SECOND = 'build-store-2.pid'

const inUse = (dir: string, pid: number): DataDirInUseError => new DataDirInUseError(dir, pid)

/** A process's start time as /proc/<pid>/stat gives it (field 22, clock ticks since boot). */
function startTimeOf (pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] as string
}

/** What a lock file of process `pid` holds: its pid and its start time. */
const lockText = (pid: number): string => `${pid} ${startTimeOf(pid)}\n`

/** The pid of a process that has exited (its lock is stale). */
async function deadPid (): Promise<number> {
  const child = reapOnExit(spawn(process.execPath, ['-e', ''], { stdio: 'ignore' }))
  await new Promise(resolve => child.once('exit', resolve))
  return child.pid as number
}

t.test('takes the folder, writes our pid, and release() removes the file', async t => {
  const dir = await freshDir(t)
  const lock = await lockDataDir(dir)
  t.equal(lock.path, join(dir, FIRST))
  t.equal(await readFile(lock.path, 'utf8'), lockText(process.pid), 'our pid and start time')
  t.same(readdirSync(dir), [FIRST], 'no helper file left beside it')
  lock.release()
  t.notOk(existsSync(lock.path), 'released')
  lock.release()
  const again = await lockDataDir(dir)
  t.equal(again.path, join(dir, FIRST), 'free again after release()')
  again.release()
})

t.test('held by this process: a second lock (even a concurrent one) is refused with our pid', async t => {
  const dir = await freshDir(t)
  const lock = await lockDataDir(dir)
  await t.rejects(lockDataDir(dir), inUse(dir, process.pid))
  t.equal(await readFile(lock.path, 'utf8'), lockText(process.pid), 'still ours')
  lock.release()

  const raced = await Promise.allSettled([lockDataDir(dir), lockDataDir(dir)])
  t.same(raced.map(r => r.status).sort(), ['fulfilled', 'rejected'], 'exactly one of two concurrent opens wins')
  for (const r of raced) if (r.status === 'fulfilled') r.value.release()
})

t.test('held by a live process: refused with its pid, its file untouched', async t => {
  const dir = await freshDir(t)
  const holder = reapOnExit(spawn('sleep', ['30'], { stdio: 'ignore' }))
  t.teardown(() => { holder.kill('SIGKILL') })
  const pid = holder.pid as number
  await writeFile(join(dir, FIRST), lockText(pid))
  const error = await lockDataDir(dir).then(() => undefined, (e: unknown) => e)
  t.type(error, DataDirInUseError)
  t.equal((error as Error).message, `DATA_DIR ${dir} is in use by another build-store (pid ${pid})`)
  t.equal(await readFile(join(dir, FIRST), 'utf8'), lockText(pid))
  t.same(readdirSync(dir), [FIRST], 'no helper file left beside it')
})

t.test('a stale lock whose pid now belongs to another process is taken over: the holder must be the process that wrote it', async t => {
  const other = reapOnExit(spawn('sleep', ['30'], { stdio: 'ignore' }))
  t.teardown(() => { other.kill('SIGKILL') })
  const pid = other.pid as number
  const ticks = Number(startTimeOf(pid))
  // the pid is alive, but the lock was written by an earlier process (another start time), or says nothing of one
  const stale: Array<[string, string]> = [['an earlier process', `${pid} ${ticks - 1}\n`], ['a later one', `${pid} ${ticks + 100}\n`],
    ['no start time', `${pid}\n`], ['pid 1 (always alive)', '1\n'], ['pid 1, another start', '1 123456789\n']]
  for (const [name, text] of stale) {
    const dir = await freshDir(t)
    await writeFile(join(dir, FIRST), text)
    const lock = await lockDataDir(dir)
    t.equal(lock.path, join(dir, SECOND), `${name}: taken over`)
    t.same(readdirSync(dir), [SECOND], `${name}: the stale file is gone`)
    lock.release()
  }
})

t.test('any content of a lock file is accepted: what cannot be read as a live holder is stale', async t => {
  const contents: Array<[string, string | Buffer]> = [
    ['empty', ''], ['garbage', 'not-a-pid'], ['a pid too large for kill()', '9999999999\n'], ['a negative pid', '-1 5\n'],
    ['binary', Buffer.from([0xff, 0x00, 0xfe, 0x0a, 0x31])], ['1 MiB of digits', '7'.repeat(1 << 20)], ['many fields', `${process.ppid} 1 2 3\n`]
  ]
  for (const [name, content] of contents) {
    const dir = await freshDir(t)
    await writeFile(join(dir, FIRST), content)
    const lock = await lockDataDir(dir)
    t.equal(lock.path, join(dir, SECOND), name)
    t.same(readdirSync(dir), [SECOND], `${name}: the stale file is gone`)
    lock.release()
  }
  // lock files that are not regular files: a folder, a dangling link, a FIFO (reading one would block for ever)
  const makers: Array<[string, (path: string) => Promise<void>]> = [
    ['a folder', async path => { await mkdir(path) }],
    ['a dangling link', async path => { await symlink('/nonexistent/lock', path) }],
    ['a FIFO', async path => { execFileSync('mkfifo', [path]) }]
  ]
  for (const [name, make] of makers) {
    const dir = await freshDir(t)
    await make(join(dir, FIRST))
    const lock = await lockDataDir(dir)
    t.equal(lock.path, join(dir, SECOND), `${name}: stale, taken over`)
    lock.release()
    const again = await lockDataDir(dir)
    again.release()
  }
})

t.test('any generation is taken over: past 15 digits, and a name with leading zeros is not a lock', async t => {
  for (const [name, next] of [['999999999999999', '1000000000000000'], ['9007199254740993', '9007199254740994'],
    ['99999999999999999999999999999999', '100000000000000000000000000000000']]) {
    const dir = await freshDir(t)
    await writeFile(join(dir, `build-store-${name}.pid`), `${await deadPid()}\n`)
    const lock = await lockDataDir(dir)
    t.equal(lock.path, join(dir, `build-store-${next}.pid`), `after ${name}`)
    t.same(readdirSync(dir), [`build-store-${next}.pid`], `${name}: the stale file is gone`)
    await t.rejects(lockDataDir(dir), inUse(dir, process.pid), `${next}: held`)
    lock.release()
  }
  const dir = await freshDir(t)
  await writeFile(join(dir, 'build-store-007.pid'), lockText(process.ppid))
  const lock = await lockDataDir(dir)
  t.equal(lock.path, join(dir, FIRST), 'build-store-007.pid is not a generation')
  lock.release()
})

t.test('a dead holder\'s lock is taken over; so is a leftover with our own pid (a restarted container\'s pid 1)', async t => {
  const dead = await deadPid()
  for (const [name, text] of [['dead child', `${dead} 100\n`], ['our pid, not held here', lockText(process.pid)], ['garbage', 'not-a-pid\n']] as const) {
    const dir = await freshDir(t)
    await writeFile(join(dir, FIRST), text)
    const lock = await lockDataDir(dir)
    t.equal(lock.path, join(dir, SECOND), name)
    t.equal(await readFile(lock.path, 'utf8'), lockText(process.pid), name)
    t.same(readdirSync(dir), [SECOND], `${name}: the stale file is gone, no helper file left`)
    lock.release()
    t.notOk(existsSync(lock.path), `${name}: released`)
  }
})

t.test('released when the process exits normally without release(); SIGKILL leaves a stale lock', async t => {
  const dir = await freshDir(t)
  const holdAndExit = `import { lockDataDir } from './${LOCK_MODULE}'; await lockDataDir(${JSON.stringify(dir)}); console.log(JSON.stringify({ msg: 'locked' }))`
  const exits = runNode(['--input-type=module', '-e', holdAndExit], {})
  t.equal(await exits.exited, 0, exits.stderr)
  t.ok(exits.lines.some(line => line.msg === 'locked'))
  t.same(readdirSync(dir), [], 'the exit handler removed the lock')

  const hold = `${holdAndExit}; setInterval(() => {}, 1000)`
  const killed = runNode(['--input-type=module', '-e', hold], {})
  t.teardown(() => { killed.process.kill('SIGKILL') })
  await killed.waitForLine(line => line.msg === 'locked')
  await t.rejects(lockDataDir(dir), inUse(dir, killed.process.pid as number))
  killed.process.kill('SIGKILL')
  await killed.exited
  t.match(await readFile(join(dir, FIRST), 'utf8'), new RegExp(`^${killed.process.pid as number} \\d+\n$`), 'stale lock left behind')
  const lock = await lockDataDir(dir)
  t.equal(lock.path, join(dir, SECOND), 'taken over')
  t.same(readdirSync(dir), [SECOND])
  lock.release()
})

t.test('several processes racing over one stale lock: exactly one wins, the others name it', async t => {
  const dir = await freshDir(t)
  await writeFile(join(dir, FIRST), `${await deadPid()}\n`)
  // each child loads the module, says ready, and tries the lock only on SIGUSR2: all start together
  const racer = `import { lockDataDir } from './${LOCK_MODULE}'
process.once('SIGUSR2', () => {
  lockDataDir(${JSON.stringify(dir)}).then(
    () => console.log(JSON.stringify({ msg: 'won' })),
    error => console.log(JSON.stringify({ msg: 'lost', error: error.message })))
})
setInterval(() => {}, 1000)
console.log(JSON.stringify({ msg: 'ready' }))`
  const racers: Child[] = Array.from({ length: 4 }, () => runNode(['--input-type=module', '-e', racer], {}))
  t.teardown(() => { for (const child of racers) child.process.kill('SIGKILL') })
  await Promise.all(racers.map(child => child.waitForLine(line => line.msg === 'ready', 20_000)))
  for (const child of racers) child.process.kill('SIGUSR2')
  const outcomes = await Promise.all(racers.map(child => child.waitForLine(line => line.msg === 'won' || line.msg === 'lost')))
  const winners = racers.filter((_, i) => outcomes[i]?.msg === 'won')
  t.equal(winners.length, 1, 'one winner')
  const winnerPid = winners[0]?.process.pid as number
  t.same(readdirSync(dir), [SECOND], 'one lock file')
  t.equal(await readFile(join(dir, SECOND), 'utf8'), lockText(winnerPid), 'it names the winner')
  for (const outcome of outcomes) if (outcome.msg === 'lost') t.equal(outcome.error, `DATA_DIR ${dir} is in use by another build-store (pid ${winnerPid})`)
})
