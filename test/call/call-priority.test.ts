import t from 'tap'
import { urgencyOf } from '../../src/call/call-priority.ts'

t.test('Priority is read as an RFC 9218 dictionary, leniently; only u counts; absent or malformed: 3', async t => {
  const cases: Array<[string, number]> = [
    ['u=0', 0], ['u=7', 7], ['u=1, i', 1], ['i, u=2', 2], [' u = 5 ', 5], ['u=4;x=1', 4], ['u=1, u=6', 6],
    ['u=9', 3], ['u=x', 3], ['u=-1', 3], ['u=10', 3], ['u=', 3], ['u', 3], ['i', 3], ['', 3], ['uu=1', 3], ['U=1', 3]
  ]
  for (const [header, urgency] of cases) t.equal(urgencyOf(header), urgency, JSON.stringify(header))
})
