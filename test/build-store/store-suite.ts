import type { Test } from 'tap'
import type { TestBackend } from './store-backends.ts'
import { badInputTests } from './suite/bad-input.ts'
import { buildTests } from './suite/builds.ts'
import { newProjectId, startTestStore, type SuiteContext } from './suite/context.ts'
import { lifecycleTests } from './suite/lifecycle.ts'
import { openApiTests } from './suite/openapi.ts'
import { serviceAccountTests } from './suite/service-accounts.ts'
import { tokenTests } from './suite/tokens.ts'

/**
 * The whole build-store suite against one backend: real stores on loopback port 0 over one
 * database per file (each test works in projects of its own), everything closed in teardown.
 */
export async function runStoreSuite (t: Test, openBackend: () => Promise<TestBackend>): Promise<void> {
  const backend = await openBackend()
  const main = await startTestStore(backend)
  t.teardown(async () => {
    await main.close()
    await backend.dispose()
  })
  const ctx: SuiteContext = {
    backend,
    main,
    project: newProjectId,
    startStore: (env, options) => startTestStore(backend, env, options)
  }
  t.test('builds', async t => { buildTests(t, ctx) })
  t.test('service accounts', async t => { serviceAccountTests(t, ctx) })
  t.test('tokens', async t => { tokenTests(t, ctx) })
  t.test('bad input and routes', async t => { badInputTests(t, ctx) })
  t.test('openapi.json', async t => { openApiTests(t, ctx) })
  t.test('lifecycle', async t => { lifecycleTests(t, ctx) })
}
