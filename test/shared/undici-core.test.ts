import t from 'tap'
import * as undici from 'undici'
import { Agent, Pool, buildConnector } from '../../src/shared/undici-core.ts'

// The sidecar loads undici's client modules without its index (see undici-core.ts): they must be
// the very classes the index exports, so an undici release that moves them fails here, not in use.

t.test('the core modules are the index\'s own', async t => {
  t.equal(Pool, undici.Pool)
  t.equal(Agent, undici.Agent)
  t.equal(buildConnector, undici.buildConnector)
})
