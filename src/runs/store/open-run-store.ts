import { MemoryRunStore } from './memory/memory-run-store.ts'
import type { PersistenceWarn } from './redis/redis-persistence.ts'
import type { RunStore, RunStoreSettings } from './run-store.ts'

/** How long a start waits for Redis before it goes on without it (recorded runs then answer 503 until it is back). */
const REACHABLE_WAIT_MS = 2000

/**
 * The run store RUN_STORE_URL names: unset, this process's memory; `redis://…`, Redis shared by
 * every sidecar given the same URL (its client is loaded only then), whose persistence settings
 * are checked once it first answers (`warn`: one line per setting that can lose runs).
 */
export async function openRunStore (url: URL | undefined, settings: RunStoreSettings, warn?: PersistenceWarn): Promise<RunStore> {
  if (url === undefined) return new MemoryRunStore(settings)
  const { RedisRunStore } = await import('./redis/redis-run-store.ts')
  const store = new RedisRunStore(url.href, settings)
  if (warn !== undefined) void store.checkPersistence(warn)
  await store.reachable(REACHABLE_WAIT_MS)
  return store
}
