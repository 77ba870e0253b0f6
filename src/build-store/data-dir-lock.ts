import { constants, readFileSync, unlinkSync } from 'node:fs'
import { link, lstat, open, readdir, unlink, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { DataDirInUseError } from '../errors.ts'

// The lock is the highest-numbered `build-store-<n>.pid` in DATA_DIR, holding its owner's pid and
// start time. A stale lock is taken over by creating n+1, never by removing n: creation (hard link)
// is exclusive, so of several starters racing over one stale lock exactly one wins, with no
// compare-and-swap needed. Generations are any size (bigint); a name with leading zeros is not one.
const LOCK_FILE = /^build-store-(0|[1-9]\d*)\.pid$/

function lockFilePath (dir: string, n: bigint): string {
  return join(dir, `build-store-${n}.pid`)
}

/**
 * What a lock file holds: `<pid> <start>`, the start being the process's start time as
 * /proc/<pid>/stat gives it (0 where there is no /proc): a live process with that pid but another
 * start time took the pid of a holder that died.
 */
const LOCK_TEXT = /^([1-9]\d{0,9}) (\d{1,20})\n$/
/** Longer content is no lock this module wrote. */
const LOCK_TEXT_MAX = 64

/** Lock files this process holds: a second open here is refused, a stale file with our pid (a restarted container's pid 1) is not ours. */
const heldHere = new Set<string>()

export interface DataDirLock {
  /** The lock file's absolute path. */
  readonly path: string
  /** Removes the lock file; later calls do nothing. */
  release: () => void
}

/**
 * Makes this process the only user of `dataDir` (PGlite has no lock of its own, and two writers
 * lose acknowledged writes). Throws DataDirInUseError naming the holder's pid while a live process
 * holds it; the lock of a process that died without releasing it (SIGKILL, power loss), one whose
 * pid another process now has, and a lock file of any other content are taken over.
 */
export async function lockDataDir (dataDir: string): Promise<DataDirLock> {
  const dir = resolve(dataDir)
  if (heldHere.has(dir)) throw new DataDirInUseError(dir, process.pid)
  heldHere.add(dir) // reserved before the first await, so two opens in this process cannot both pass
  const candidate = join(dir, `build-store-candidate-${process.pid}.tmp`)
  let path: string
  try {
    // written beside, then hard-linked into place: a lock file appears atomically, never empty, never overwritten
    await writeFile(candidate, `${process.pid} ${startTimeOf(process.pid) ?? '0'}\n`)
    path = await takeNextGeneration(dir, candidate)
  } catch (error) {
    heldHere.delete(dir)
    throw error
  } finally {
    await unlink(candidate).catch(() => {})
  }
  const release = (): void => {
    if (!heldHere.delete(dir)) return
    process.off('exit', release)
    try { unlinkSync(path) } catch {} // already gone: nothing to release
  }
  process.on('exit', release) // a normal exit that skipped close() still frees the folder
  return { path, release }
}

async function takeNextGeneration (dir: string, candidate: string): Promise<string> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const generations = await listGenerations(dir)
    const top = generations.at(-1) ?? 0n
    if (top > 0n) {
      const holder = await readHolder(lockFilePath(dir, top))
      if (holder === undefined) continue // released while we looked: look again
      if (holdsIt(holder)) throw new DataDirInUseError(dir, holder.pid)
    }
    const path = lockFilePath(dir, top + 1n)
    if (!await linkIfAbsent(candidate, path)) continue // another starter took this generation first
    // a generation below a live one (ours came from a listing older than its clean-up) is not the lock
    if ((await listGenerations(dir)).at(-1) !== top + 1n) { await unlink(path).catch(() => {}); continue }
    for (const older of generations) await unlink(lockFilePath(dir, older)).catch(() => {})
    return path
  }
  throw new Error(`DATA_DIR ${dir}: lock still contended after 20 attempts`)
}

async function listGenerations (dir: string): Promise<bigint[]> {
  const generations: bigint[] = []
  for (const name of await readdir(dir)) {
    const match = LOCK_FILE.exec(name)
    if (match !== null) generations.push(BigInt(match[1] as string))
  }
  return generations.sort((a, b) => a < b ? -1 : a > b ? 1 : 0)
}

async function linkIfAbsent (from: string, to: string): Promise<boolean> {
  try {
    await link(from, to)
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false
    throw error
  }
}

/** Who a lock file names: a pid and its start time ('0': unknown); pid 0 for a file no build store wrote. */
interface Holder { readonly pid: number, readonly start: string }

const STALE: Holder = { pid: 0, start: '0' }

/**
 * The holder a lock file names; undefined when the file is gone. Any other content, and anything
 * but a regular file (a folder, a link, a FIFO, which a read would block on), is stale.
 */
async function readHolder (path: string): Promise<Holder | undefined> {
  let text: string
  try {
    if (!(await lstat(path)).isFile()) return STALE
    const file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW)
    try {
      const buffer = Buffer.alloc(LOCK_TEXT_MAX + 1)
      const { bytesRead } = await file.read(buffer, 0, buffer.length, 0)
      text = buffer.toString('latin1', 0, bytesRead)
    } finally {
      await file.close()
    }
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? undefined : STALE
  }
  const match = LOCK_TEXT.exec(text)
  return match === null ? STALE : { pid: Number(match[1]), start: match[2] as string }
}

/**
 * Whether the process a lock names still holds it: alive (signal 0 probes without signalling:
 * ESRCH = no such process; EPERM = alive, another user's) and, where /proc tells, started when
 * the lock's writer started (else the pid was reused by another process).
 */
function holdsIt (holder: Holder): boolean {
  const { pid } = holder
  if (pid <= 0 || pid > MAX_PID || pid === process.pid) return false // our own pid here is an earlier process's leftover: heldHere caught ours
  try {
    process.kill(pid, 0)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false
  }
  if (holder.start === '0') return true // written where there is no /proc: alive is all we can tell
  const start = startTimeOf(pid)
  return start === undefined || start === holder.start
}

/** The largest pid Linux gives (2^22). */
const MAX_PID = 4_194_304

/** The start time of process `pid` (field 22 of /proc/<pid>/stat, clock ticks after boot); undefined without /proc. */
function startTimeOf (pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1')
    // the command name (field 2) is in parentheses and may hold spaces and parentheses: count after the last `)`
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]
  } catch {
    return undefined
  }
}
