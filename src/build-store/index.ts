/** The build store's public surface, for the bin, the demo and the benchmark. */
export { startBuildStore, type BuildStoreOptions, type RunningBuildStore } from './store-server.ts'
export { loadStoreConfig, storeHelp, type StoreConfig } from './store-config.ts'
export { openEmbeddedDatabase, openPostgresDatabase, type Database } from './database.ts'
export type { Build, BuildFields, BuildKey } from './build-schema.ts'
export type { CreatedServiceAccount, ServiceAccount } from './api-schemas.ts'
