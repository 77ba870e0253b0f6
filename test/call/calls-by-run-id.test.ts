import t from 'tap'
import { CallsByRunId } from '../../src/call/calls-by-run-id.ts'
import type { HttpCall } from '../../src/call/http-call.ts'

const scope = { projectId: 'p', appName: 'a' }

/** What the map reads of a call: its run id, route, whether it was answered; `freed` is what HttpCall does as it closes. */
function fakeCall (runId: string): HttpCall & { freed: () => void } {
  const call = {
    runId,
    route: scope,
    settled: false,
    outliving: false,
    inFlight: undefined as { leave: () => void } | undefined,
    freed () { call.inFlight?.leave() }
  }
  return call as unknown as HttpCall & { freed: () => void }
}

t.test('a call is found by its run id until it closes', async t => {
  const calls = new CallsByRunId()
  const call = fakeCall('r1')
  calls.add(call)
  t.equal(calls.find(scope, 'r1'), call)
  t.equal(calls.find({ projectId: 'p', appName: 'other' }, 'r1'), undefined, 'not from another app')
  call.freed()
  t.equal(calls.find(scope, 'r1'), undefined, 'gone once closed')
  call.freed() // a second close does nothing
  t.equal(calls.find(scope, 'r1'), undefined)
})

t.test('the map\'s entry lets go of its call as it closes (a table V8 rehashed away keeps its entries until a full collection)', async t => {
  const calls = new CallsByRunId()
  const call = fakeCall('r1')
  calls.add(call)
  const entry = call.inFlight as unknown as { call: unknown }
  t.equal(entry.call, call)
  call.freed()
  t.equal(entry.call, undefined, 'the entry holds the call no longer')
})

t.test('two calls with one run id: the later is found; the earlier closing leaves it', async t => {
  const calls = new CallsByRunId()
  const earlier = fakeCall('same')
  const later = fakeCall('same')
  calls.add(earlier)
  calls.add(later)
  t.equal(calls.find(scope, 'same'), later)
  earlier.freed()
  t.equal(calls.find(scope, 'same'), later, 'the later call stays')
  later.freed()
  t.equal(calls.find(scope, 'same'), undefined)
})

t.test('two calls of one app with one run id are canceled together; a third, of another app, is not', async t => {
  const calls = new CallsByRunId()
  const aborted: string[] = []
  const make = (name: string, route = scope): HttpCall & { freed: () => void } => {
    const call = fakeCall('same')
    Object.assign(call, { route, forwarded: true, abort: () => { aborted.push(name) } })
    return call
  }
  const first = make('first')
  const other = make('other app', { projectId: 'p', appName: 'other' })
  const second = make('second')
  calls.add(first)
  calls.add(other)
  calls.add(second)
  t.equal(calls.cancel(scope, 'same'), true)
  t.same(aborted, ['second', 'first'], 'both of the app, newest first; not the other app\'s')
  t.equal(calls.cancel({ projectId: 'p', appName: 'none' }, 'same'), false)
})

t.test('a call in the middle of a chain leaves it; the others stay, in order', async t => {
  const calls = new CallsByRunId()
  const [a, b, c] = [fakeCall('same'), fakeCall('same'), fakeCall('same')]
  calls.add(a)
  calls.add(b)
  calls.add(c)
  b.freed()
  t.equal(calls.find(scope, 'same'), c)
  c.freed()
  t.equal(calls.find(scope, 'same'), a, 'the oldest is found once the newer ones closed')
  a.freed()
  t.equal(calls.find(scope, 'same'), undefined)
})
