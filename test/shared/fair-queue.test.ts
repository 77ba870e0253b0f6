import t from 'tap'
import { FairQueue, URGENCY_LEVELS } from '../../src/shared/fair-queue.ts'
import { patient } from '../helpers/timing.ts'

interface Item { readonly name: string, dead: boolean }

const item = (name: string): Item => ({ name, dead: false })
const live = (it: Item): boolean => !it.dead

function drain (queue: FairQueue<Item>): string[] {
  const out: string[] = []
  for (let next = queue.shift(); next !== undefined; next = queue.shift()) out.push(next.name)
  return out
}

t.test('by urgency, then round robin across keys, each key\'s own in order', async t => {
  const queue = new FairQueue<Item>(live)
  for (const [u, key, name] of [[3, 'a', 'a1'], [3, 'a', 'a2'], [3, 'a', 'a3'], [3, 'b', 'b1'], [0, 'c', 'c1'], [7, 'a', 'a4'], [3, 'b', 'b2']] as const) queue.push(u, key, item(name))
  t.equal(queue.nextUrgency(), 0)
  t.equal(queue.peek()?.name, 'c1')
  t.same(drain(queue), ['c1', 'a1', 'b1', 'a2', 'b2', 'a3', 'a4'])
  t.equal(queue.nextUrgency(), URGENCY_LEVELS, 'empty')
})

t.test('dead items are dropped when met; putFirst gives an item back its place', async t => {
  const queue = new FairQueue<Item>(live)
  const a1 = item('a1')
  const b1 = item('b1')
  queue.push(3, 'a', a1)
  queue.push(3, 'a', item('a2'))
  queue.push(3, 'b', b1)
  b1.dead = true
  const first = queue.shift() as Item
  t.equal(first.name, 'a1')
  queue.putFirst(3, 'a', first)
  t.same(drain(queue), ['a1', 'a2'])
})

t.test('putFirst restores the round as it was before the shift: the item first again, then the others in turn', async t => {
  const queue = new FairQueue<Item>(live)
  for (const [key, name] of [['a', 'a1'], ['a', 'a2'], ['b', 'b1'], ['b', 'b2']] as const) queue.push(3, key, item(name))
  const first = queue.shift() as Item
  queue.putFirst(3, 'a', first)
  t.same(drain(queue), ['a1', 'b1', 'a2', 'b2'])
})

t.test('a capped key is passed over, its items kept in order, until unpark', async t => {
  const capped = new Set(['a'])
  const queue = new FairQueue<Item>(live, key => capped.has(key))
  queue.push(1, 'a', item('a1'))
  queue.push(1, 'a', item('a2'))
  queue.push(5, 'b', item('b1'))
  t.equal(queue.shift()?.name, 'b1')
  t.equal(queue.shift(), undefined, 'only a capped key waits')
  capped.delete('a')
  queue.unpark('a')
  t.same(drain(queue), ['a1', 'a2'])
})

t.test('O(1): 100,000 items across 1,000 keys and 8 urgencies go in and out, each looked at a bounded number of times', async t => {
  const n = 100_000
  let liveChecks = 0
  let capChecks = 0
  const queue = new FairQueue<Item>(it => { liveChecks++; return live(it) }, () => { capChecks++; return false })
  const items = Array.from({ length: n }, (_, i) => item(String(i)))
  for (let i = 0; i < n; i += 10) (items[i] as Item).dead = true // some canceled
  const started = performance.now()
  for (let i = 0; i < n; i++) queue.push(i % 8, `k${i % 1000}`, items[i] as Item)
  let served = 0
  while (queue.shift() !== undefined) served++
  const ms = performance.now() - started
  t.equal(served, n - n / 10)
  // the work counted, not timed: a scan of the round or of a line per shift would check items or keys ~n times each
  t.ok(liveChecks <= 2 * n, `${liveChecks} live checks for ${n} items`)
  t.ok(capChecks <= 2 * n, `${capChecks} cap checks for ${n} items`)
  // a blow-up the checks miss (an O(n) copy per operation: ~10^10 steps) takes minutes, far past the scaled bound (~50 ms quiet)
  t.ok(ms < patient(1000), `${n} items in ${Math.round(ms)} ms`)
})

t.test('items told dead (a wait abandoned) are not kept without bound where they are not met: a capped key, a line behind a live head', async t => {
  let capped = true
  const queue = new FairQueue<Item>(live, key => key === 'a' && capped)
  queue.push(3, 'a', item('a-live'))
  t.equal(queue.shift(), undefined, 'a is capped: its line parked')
  for (let i = 0; i < 1000; i++) {
    const it = item(`a${i}`)
    queue.push(3, 'a', it)
    it.dead = true
    queue.forget(3, 'a')
    t.ok(queue.stored() <= 3, `at most twice the live items, and the one being added (${queue.stored()})`)
  }
  const behind = [item('b1'), item('b2')]
  for (const it of behind) queue.push(5, 'b', it)
  for (let i = 0; i < 1000; i++) {
    const it = item(`b-dead-${i}`)
    queue.push(5, 'b', it)
    it.dead = true
    queue.forget(5, 'b')
  }
  t.ok(queue.stored() <= 1 + 2 * 2 + 1, `b's line behind its live head keeps few dead (${queue.stored()})`)
  capped = false
  queue.unpark('a')
  t.same(drain(queue), ['a-live', 'b1', 'b2'], 'the live ones, in order')
  t.equal(queue.stored(), 0)
})

t.test('callers that wait and leave keep nothing: their emptied lines are swept from the round long before a slot frees', async t => {
  const live = new Set<string>()
  const q = new FairQueue<string>(item => live.has(item))
  const holder = 'holder-item'
  live.add(holder)
  q.push(3, 'holder', holder) // one caller stays, at the head: no slot frees meanwhile
  for (let i = 0; i < 10_000; i++) {
    const item = `left-${i}`
    live.add(item)
    q.push(3, `caller-${i}`, item)
    live.delete(item)
    q.forget(3, `caller-${i}`)
  }
  t.ok(q.lineCount() <= 3, `lines kept: ${q.lineCount()} (of 10,001 callers)`)
  t.equal(q.stored(), 1)
  t.equal(q.shift(), holder, 'the caller still waiting is served as before')
  t.equal(q.shift(), undefined)
  t.equal(q.lineCount(), 0)
})

t.test('a sweep keeps every line with items in its place in the round', async t => {
  const live = new Set<string>(['a1', 'b1', 'b2', 'c1', 'w1', 'x1', 'y1', 'z1'])
  const q = new FairQueue<string>(item => live.has(item))
  for (const [key, name] of [['a', 'a1'], ['w', 'w1'], ['x', 'x1'], ['b', 'b1'], ['b', 'b2'], ['y', 'y1'], ['z', 'z1'], ['c', 'c1']]) q.push(3, key as string, name as string)
  for (const key of ['w', 'x', 'y']) {
    live.delete(`${key}1`)
    q.forget(3, key)
  }
  t.equal(q.lineCount(), 7, 'three of seven lines emptied: not swept yet')
  live.delete('z1')
  q.forget(3, 'z')
  t.equal(q.lineCount(), 3, 'four of seven: swept')
  t.same([q.shift(), q.shift(), q.shift(), q.shift(), q.shift()], ['a1', 'b1', 'c1', 'b2', undefined], 'round robin, in the order they came')
})
