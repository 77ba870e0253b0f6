import type * as Undici from 'undici'
import { requireCjs } from './require-cjs.ts'

// undici's client core, without its index: the index also loads fetch, WebSocket, EventSource,
// the cache and the mock agent, none of which the sidecar uses, and they hold about 8 MB of every
// replica's resident memory (measured: a process that requires the index is at 61 MB, one that
// requires these modules at 52 MB). undici has no `exports` map, so these paths are public; the
// types are the index's own. test/shared/undici-core.test.ts checks they are the index's classes.

export const Pool: typeof Undici.Pool = requireCjs('undici/lib/dispatcher/pool.js')
export const Agent: typeof Undici.Agent = requireCjs('undici/lib/dispatcher/agent.js')
export const buildConnector: typeof Undici.buildConnector = requireCjs('undici/lib/core/connect.js')
