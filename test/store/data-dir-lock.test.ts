import { spawn } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { DataDirInUseError } from '../../src/errors.ts'
import { lockDataDir } from '../../src/store/data-dir-lock.ts'
import { type Child, runNode } from '../helpers/child-process.ts'

async function freshDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'data-dir-lock-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** Lock files are `build-store-<generation>.pid`; a stale one is taken over by the next generation. */
const FIRST = 'build-store-1.pid'
const SECOND = 'build-store-2.pid'

const inUse = (dir: string, pid: number): DataDirInUseError => new DataDirInUseError(dir, pid)

/** The pid of a process that has exited (its lock is stale). */
async function deadPid (): Promise<number> {
  const child = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' })
  await new Promise(resolve => child.once('exit', resolve))
  return child.pid as number
}

t.test('takes the folder, writes our pid, and release() removes the file', async t => {
  const dir = await freshDir(t)
  const lock = await lockDataDir(dir)
  t.equal(lock.path, join(dir, FIRST))
  t.equal(await readFile(lock.path, 'utf8'), `${process.pid}\n`)
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
  t.equal(await readFile(lock.path, 'utf8'), `${process.pid}\n`, 'still ours')
  lock.release()

  const raced = await Promise.allSettled([lockDataDir(dir), lockDataDir(dir)])
  t.same(raced.map(r => r.status).sort(), ['fulfilled', 'rejected'], 'exactly one of two concurrent opens wins')
  for (const r of raced) if (r.status === 'fulfilled') r.value.release()
})

t.test('held by a live process: refused with its pid, its file untouched', async t => {
  const dir = await freshDir(t)
  const holder = spawn('sleep', ['30'], { stdio: 'ignore' })
  t.teardown(() => { holder.kill('SIGKILL') })
  const pid = holder.pid as number
  await writeFile(join(dir, FIRST), `${pid}\n`)
  const error = await lockDataDir(dir).then(() => undefined, (e: unknown) => e)
  t.type(error, DataDirInUseError)
  t.equal((error as Error).message, `DATA_DIR ${dir} is in use by another build-store (pid ${pid})`)
  t.equal(await readFile(join(dir, FIRST), 'utf8'), `${pid}\n`)
  t.same(readdirSync(dir), [FIRST], 'no helper file left beside it')
})

t.test('a dead holder\'s lock is taken over; so is a leftover with our own pid (a restarted container\'s pid 1)', async t => {
  for (const [name, pid] of [['dead child', await deadPid()], ['our pid, not held here', process.pid], ['garbage', 'not-a-pid']] as const) {
    const dir = await freshDir(t)
    await writeFile(join(dir, FIRST), `${pid}\n`)
    const lock = await lockDataDir(dir)
    t.equal(lock.path, join(dir, SECOND), name)
    t.equal(await readFile(lock.path, 'utf8'), `${process.pid}\n`, name)
    t.same(readdirSync(dir), [SECOND], `${name}: the stale file is gone, no helper file left`)
    lock.release()
    t.notOk(existsSync(lock.path), `${name}: released`)
  }
})

t.test('released when the process exits normally without release(); SIGKILL leaves a stale lock', async t => {
  const dir = await freshDir(t)
  const holdAndExit = `import { lockDataDir } from './src/store/data-dir-lock.ts'; await lockDataDir(${JSON.stringify(dir)}); console.log(JSON.stringify({ msg: 'locked' }))`
  const exits = runNode(['--import', 'tsx', '--input-type=module', '-e', holdAndExit], {})
  t.equal(await exits.exited, 0, exits.stderr)
  t.ok(exits.lines.some(line => line.msg === 'locked'))
  t.same(readdirSync(dir), [], 'the exit handler removed the lock')

  const hold = `${holdAndExit}; setInterval(() => {}, 1000)`
  const killed = runNode(['--import', 'tsx', '--input-type=module', '-e', hold], {})
  t.teardown(() => { killed.process.kill('SIGKILL') })
  await killed.waitForLine(line => line.msg === 'locked')
  await t.rejects(lockDataDir(dir), inUse(dir, killed.process.pid as number))
  killed.process.kill('SIGKILL')
  await killed.exited
  t.equal(await readFile(join(dir, FIRST), 'utf8'), `${killed.process.pid as number}\n`, 'stale lock left behind')
  const lock = await lockDataDir(dir)
  t.equal(lock.path, join(dir, SECOND), 'taken over')
  t.same(readdirSync(dir), [SECOND])
  lock.release()
})

t.test('several processes racing over one stale lock: exactly one wins, the others name it', async t => {
  const dir = await freshDir(t)
  await writeFile(join(dir, FIRST), `${await deadPid()}\n`)
  // each child loads the module, says ready, and tries the lock only on SIGUSR2: all start together
  const racer = `import { lockDataDir } from './src/store/data-dir-lock.ts'
process.once('SIGUSR2', () => {
  lockDataDir(${JSON.stringify(dir)}).then(
    () => console.log(JSON.stringify({ msg: 'won' })),
    error => console.log(JSON.stringify({ msg: 'lost', error: error.message })))
})
setInterval(() => {}, 1000)
console.log(JSON.stringify({ msg: 'ready' }))`
  const racers: Child[] = Array.from({ length: 4 }, () => runNode(['--import', 'tsx', '--input-type=module', '-e', racer], {}))
  t.teardown(() => { for (const child of racers) child.process.kill('SIGKILL') })
  await Promise.all(racers.map(child => child.waitForLine(line => line.msg === 'ready', 20_000)))
  for (const child of racers) child.process.kill('SIGUSR2')
  const outcomes = await Promise.all(racers.map(child => child.waitForLine(line => line.msg === 'won' || line.msg === 'lost')))
  const winners = racers.filter((_, i) => outcomes[i]?.msg === 'won')
  t.equal(winners.length, 1, 'one winner')
  const winnerPid = winners[0]?.process.pid as number
  t.same(readdirSync(dir), [SECOND], 'one lock file')
  t.equal(await readFile(join(dir, SECOND), 'utf8'), `${winnerPid}\n`, 'it names the winner')
  for (const outcome of outcomes) if (outcome.msg === 'lost') t.equal(outcome.error, `DATA_DIR ${dir} is in use by another build-store (pid ${winnerPid})`)
})
