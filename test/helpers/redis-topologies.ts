// Real Redis topologies for tests, on free loopback ports, their files in a temp directory, every
// process killed (and the directory removed) at teardown: Sentinel (a primary, a replica, three
// sentinels) and Cluster (three masters, optionally a replica each). Under CI=true a missing
// redis-server fails the test; otherwise the start resolves undefined and the test is skipped.
export { startSentinelRedis, type SentinelRedis, type SentinelRedisOptions } from './redis-sentinel-topology.ts'
export { startRedisCluster, type RedisCluster, type RedisClusterOptions } from './redis-cluster-topology.ts'
