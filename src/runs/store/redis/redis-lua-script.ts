import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import { isCluster } from './redis-connect.ts'

/** ioredis's Buffer-reply variants of EVALSHA and EVAL (there at run time, missing from its types). */
interface BufferScripts {
  evalshaBuffer: (...args: Array<string | Buffer | number>) => Promise<unknown>
  evalBuffer: (...args: Array<string | Buffer | number>) => Promise<unknown>
}

/** A script's text and its SHA1 (the name EVALSHA knows it by). */
interface ScriptText { readonly source: string, readonly sha: string }

const scriptText = (source: string): ScriptText => ({ source, sha: createHash('sha1').update(source).digest('hex') })

/**
 * A Lua script run with EVALSHA, loaded with EVAL the first time a server does not know it. On a
 * cluster its messages go out with SPUBLISH (sharded pub/sub: the channel is in the keys' slot, and
 * only that slot's node carries it), elsewhere with PUBLISH (Redis 6.2 has no other).
 */
export class LuaScript {
  readonly #plain: ScriptText
  readonly #sharded: ScriptText

  constructor (source: string) {
    this.#plain = scriptText(source)
    this.#sharded = scriptText(source.replaceAll("redis.call('PUBLISH'", "redis.call('SPUBLISH'"))
  }

  async run (redis: Redis, keys: readonly string[], args: ReadonlyArray<string | Buffer | number>): Promise<unknown> {
    const { sha, source } = this.#for(redis)
    try {
      return await redis.evalsha(sha, keys.length, ...keys, ...args)
    } catch (error) {
      if (!String((error as Error).message).startsWith('NOSCRIPT')) throw error
      return await redis.eval(source, keys.length, ...keys, ...args)
    }
  }

  /** Loads it into the server's script cache (so the first EVALSHA after a (re)connect finds it). */
  async load (redis: Redis): Promise<void> {
    await redis.script('LOAD', this.#for(redis).source)
  }

  /** As `run`, with bulk replies as Buffers (binary values). */
  async runBuffer (redis: Redis, keys: readonly string[], args: ReadonlyArray<string | Buffer | number>): Promise<unknown> {
    const { sha, source } = this.#for(redis)
    try {
      return await (redis as unknown as BufferScripts).evalshaBuffer(sha, keys.length, ...keys, ...args)
    } catch (error) {
      if (!String((error as Error).message).startsWith('NOSCRIPT')) throw error
      return await (redis as unknown as BufferScripts).evalBuffer(source, keys.length, ...keys, ...args)
    }
  }

  #for (redis: Redis): ScriptText { return isCluster(redis) ? this.#sharded : this.#plain }
}
