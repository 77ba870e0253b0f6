import t, { type Test } from 'tap'
import type { OutgoingHttpHeaders } from 'node:http'
import { type RunsApp, runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { privateRunStore } from '../../helpers/redis-server.ts'

// The order of Priority and fair share holds when the slot is busy with a run as the next runs
// queue: a run taken ahead for the busy slot still counts as waiting (REPLICA_CONCURRENCY=1).

const from = (caller: string, priority?: string): OutgoingHttpHeaders =>
  priority === undefined ? { 'x-forwarded-for': caller } : { 'x-forwarded-for': caller, priority }

/** Answers the app's held requests one after another as they come, `n` in all; their paths in arrival order. */
async function answerInTurn (app: RunsApp, n: number): Promise<string[]> {
  for (let i = 1; i <= n; i++) (await app.waitForHeld(i)).res.end('done')
  return app.held.map(held => held.url)
}

for (const store of ['memory', 'redis'] as const) {
  const storeEnv = async (t: Test): Promise<Record<string, string>> => store === 'memory' ? {} : (await privateRunStore(t)).env

  t.test(`${store}: a u=0 run queued behind a u=7 one starts first when the busy slot frees`, async t => {
    const app = await runsAppFor(t)
    const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', ...await storeEnv(t) })
    const client = runsClient({ base: h.base })
    t.equal((await client.submit('/hold/busy', 'run-busy', { headers: from('z') })).status, 202)
    await app.waitForHeld(1)
    t.equal((await client.submit('/hold/u7', 'run-u7', { headers: from('a', 'u=7') })).status, 202)
    t.equal((await client.submit('/hold/u0', 'run-u0', { headers: from('b', 'u=0') })).status, 202)
    t.same(await answerInTurn(app, 3), ['/hold/busy', '/hold/u0', '/hold/u7'])
    for (const run of ['run-busy', 'run-u0', 'run-u7']) t.equal((await client.finished(run)).record.status, 'succeeded')
  })

  t.test(`${store}: caller B's one run is among the next 2 starts behind caller A's 20 (Redis: the next)`, async t => {
    const app = await runsAppFor(t)
    const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', ...await storeEnv(t) })
    const client = runsClient({ base: h.base })
    for (let i = 1; i <= 20; i++) {
      t.equal((await client.submit(`/hold/a${i}`, `run-a${i}`, { headers: from('a') })).status, 202)
      if (i === 1) await app.waitForHeld(1)
    }
    t.equal((await client.submit('/hold/b1', 'run-b1', { headers: from('b') })).status, 202)
    const order = await answerInTurn(app, 21)
    t.equal(order[0], '/hold/a1')
    // the memory store's round robin gives A's line its turn first (it waited before B came); the Redis store's start tags put B's run next
    t.ok(order.indexOf('/hold/b1') <= (store === 'memory' ? 2 : 1), `B's run among the next starts (${order.slice(0, 4).join(' ')})`)
    t.same(order.filter(url => url !== '/hold/b1'), Array.from({ length: 20 }, (_, i) => `/hold/a${i + 1}`), 'A\'s own in order')
  })
}
