import type { RunStoreAddress } from '../../config/run-store-address.ts'
import { MemoryRunStore } from './memory/memory-run-store.ts'
import type { RedisRunStoreOptions } from './redis/redis-context.ts'
import type { PersistenceWarn } from './redis/redis-persistence.ts'
import type { RunStore, RunStoreSettings } from './run-store.ts'

/** How long a start waits for Redis before it goes on without it (recorded runs then answer 503 until it is back). */
const REACHABLE_WAIT_MS = 2000

/**
 * The run store RUN_STORE_URL names: unset, this process's memory; a Redis address (one server,
 * Sentinel or Cluster), Redis shared by every sidecar given the same address (its client is loaded
 * only then), `options.consumer` naming this sidecar there; its persistence settings are checked
 * once it first answers (`warn`: one line per setting that can lose runs).
 */
export async function openRunStore (address: RunStoreAddress | undefined, settings: RunStoreSettings, options: RedisRunStoreOptions = {}, warn?: PersistenceWarn): Promise<RunStore> {
  if (address === undefined) return new MemoryRunStore(settings)
  const { scope } = settings
  if (scope === undefined) throw new Error('a shared run store serves one app: PROJECT_ID and APP_NAME are needed') // the config refuses it first
  const { RedisRunStore } = await import('./redis/redis-run-store.ts')
  const store = new RedisRunStore(address, { ...settings, scope }, options)
  if (warn !== undefined) void store.checkPersistence(warn)
  await store.reachable(REACHABLE_WAIT_MS)
  return store
}
