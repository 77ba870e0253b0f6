import t from 'tap'
import { type IndexedRun, MemoryRunIndex } from '../../../src/runs/store/memory/memory-run-index.ts'

// The memory store's per-app index of runs: newest first from any place, and bounded by the runs held.

const entry = (runId: string, createdAt: number, seq = 0): IndexedRun => ({ runId, createdAt, key: `s/${runId}`, seq })

t.test('newest first (created_at, then run id), from just after a place; runs gone are skipped', async t => {
  const held = new Set(['a', 'b', 'c', 'd', 'e'])
  const index = new MemoryRunIndex<string>(e => held.has(e.runId) ? e.runId : undefined)
  // out of order as calls may be recorded: the place is found all the same
  for (const [id, at] of [['b', 10], ['a', 10], ['d', 30], ['c', 20], ['e', 30], ['gone', 25]] as const) index.add('s', entry(id, at))
  held.delete('gone')
  t.same([...index.newestFirst('s', undefined)], ['e', 'd', 'c', 'b', 'a'])
  t.same([...index.newestFirst('s', { createdAt: 30, runId: 'd' })], ['c', 'b', 'a'], 'after d')
  t.same([...index.newestFirst('s', { createdAt: 30, runId: 'e' })], ['d', 'c', 'b', 'a'], 'after e')
  t.same([...index.newestFirst('s', { createdAt: 25, runId: 'x' })], ['c', 'b', 'a'], 'after a place no run holds')
  t.same([...index.newestFirst('s', { createdAt: 10, runId: 'a' })], [])
  t.same([...index.newestFirst('other', undefined)], [], 'another scope')
})

t.test('a run id recorded again is listed once, at its new place', async t => {
  let current = 1
  const index = new MemoryRunIndex<string>(e => e.seq === current ? `${e.runId}@${e.createdAt}` : undefined)
  index.add('s', entry('x', 1, 0))
  index.add('s', entry('x', 5, 1))
  t.same([...index.newestFirst('s', undefined)], ['x@5'])
  current = 2
  t.same([...index.newestFirst('s', undefined)], [], 'gone')
})

t.test('the index stays within twice the runs held, however many come and go', async t => {
  const held = new Set<string>()
  let scanned = 0
  const index = new MemoryRunIndex<string>(e => { scanned++; return held.has(e.runId) ? e.runId : undefined })
  for (let i = 0; i < 10_000; i++) {
    const id = `r${i}`
    held.add(id)
    if (i >= 10) held.delete(`r${i - 10}`) // ten held at a time
    index.add('s', entry(id, i))
  }
  scanned = 0
  t.same([...index.newestFirst('s', undefined)].length, 10)
  t.ok(scanned <= 128, `a listing walks at most the sweep's bound (${scanned} entries)`)
})
