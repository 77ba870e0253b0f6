import t from 'tap'
import { postgresBackend } from './store-backends.ts'
import { runStoreSuite } from './store-suite.ts'

// The store suite on PostgreSQL at TEST_DATABASE_URL, in a schema of its own dropped at the end.
const url = process.env.TEST_DATABASE_URL
if (url === undefined || url === '') {
  if (process.env.CI === 'true' || process.env.CI === '1') {
    t.fail('TEST_DATABASE_URL is not set: the PostgreSQL store suite cannot run in CI (.ci/run sets it)')
  } else {
    t.pass('skipped: set TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test to run the store suite on PostgreSQL', { skip: true })
  }
} else {
  await runStoreSuite(t, () => postgresBackend(url))
}
