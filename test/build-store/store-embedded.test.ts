import t from 'tap'
import { embeddedBackend } from './store-backends.ts'
import { runStoreSuite } from './store-suite.ts'

// The store suite on embedded PostgreSQL (PGlite) in a temporary DATA_DIR.
await runStoreSuite(t, embeddedBackend)
