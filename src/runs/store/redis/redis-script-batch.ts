import type { Redis } from 'ioredis'
import { keySlot } from './redis-connect.ts'
import { LuaScript } from './redis-lua-script.ts'

/** Most calls run in one batch (its keys and arguments in one EVALSHA). */
const MAX_BATCH = 64

interface Call {
  readonly keys: readonly string[]
  readonly args: ReadonlyArray<string | Buffer | number>
  readonly resolve: (reply: unknown) => void
  readonly reject: (error: unknown) => void
}

/**
 * A script whose calls made in one turn of the event loop run as one: its body wrapped in a loop
 * over them (`one` per call, in order, as the calls came), one EVALSHA for up to MAX_BATCH calls,
 * one reply each. Under load this saves the client most of its per-command cost (command object,
 * promise, reply parsing), which dominates a small script's; a call alone runs the plain script.
 * An error reply (a refused write: OOM, READONLY, checked at a script's first write) fails every
 * call of its batch, as it would each call alone. Calls are batched per client and per hash slot
 * of their first key (on a cluster a script's keys share one slot; an app's keys share its hash tag).
 * Each call has `shared` keys the same for all calls of a slot first (a stream), then `own` keys and
 * `args` arguments of its own.
 */
export class BatchedScript {
  readonly #one: LuaScript
  readonly #batch: LuaScript
  readonly #shared: number
  readonly #own: number
  readonly #args: number
  readonly #buffers: boolean
  readonly #waiting = new WeakMap<Redis, Map<number, Call[]>>()

  constructor (source: string, shape: { shared: number, own: number, args: number, buffers?: boolean }) {
    this.#one = new LuaScript(source)
    this.#batch = new LuaScript(`
local function one (KEYS, ARGV)${source}end
local shared, own, count = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 0, (#KEYS - shared) / own - 1 do
  local k, a = {}, {}
  for j = 1, shared do k[j] = KEYS[j] end
  for j = 1, own do k[shared + j] = KEYS[shared + i * own + j] end
  for j = 1, count do a[j] = ARGV[3 + i * count + j] end
  local reply = one(k, a)
  if reply == nil then reply = false end
  out[i + 1] = reply
end
return out
`)
    this.#shared = shape.shared
    this.#own = shape.own
    this.#args = shape.args
    this.#buffers = shape.buffers === true
  }

  /** Both scripts, for loading at connect. */
  get scripts (): readonly LuaScript[] { return [this.#one, this.#batch] }

  /** The script's reply to this call (the plain script's reply, as if it ran alone). */
  async run (redis: Redis, keys: readonly string[], args: ReadonlyArray<string | Buffer | number>): Promise<unknown> {
    if (keys.length !== this.#shared + this.#own || args.length !== this.#args) throw new TypeError(`a batched script takes ${this.#shared + this.#own} keys and ${this.#args} arguments`)
    let bySlot = this.#waiting.get(redis)
    if (bySlot === undefined) {
      bySlot = new Map()
      this.#waiting.set(redis, bySlot)
    }
    const slot = keySlot(keys[0] as string)
    let batch = bySlot.get(slot)
    if (batch === undefined) {
      const calls: Call[] = []
      bySlot.set(slot, calls)
      // every call of this turn of the event loop (the replies and requests it handles) joins it
      setImmediate(() => {
        bySlot.delete(slot)
        for (let from = 0; from < calls.length; from += MAX_BATCH) this.#send(redis, calls.slice(from, from + MAX_BATCH))
      })
      batch = calls
    }
    const joined = batch
    return await new Promise((resolve, reject) => { joined.push({ keys, args, resolve, reject }) })
  }

  #send (redis: Redis, calls: Call[]): void {
    if (calls.length === 1) {
      const [call] = calls as [Call]
      const reply = this.#buffers ? this.#one.runBuffer(redis, call.keys, call.args) : this.#one.run(redis, call.keys, call.args)
      reply.then(call.resolve, call.reject)
      return
    }
    const keys: string[] = (calls[0] as Call).keys.slice(0, this.#shared)
    const args: Array<string | Buffer | number> = [this.#shared, this.#own, this.#args]
    for (const call of calls) {
      for (let i = this.#shared; i < call.keys.length; i++) keys.push(call.keys[i] as string)
      for (const arg of call.args) args.push(arg)
    }
    const replies = this.#buffers ? this.#batch.runBuffer(redis, keys, args) : this.#batch.run(redis, keys, args)
    replies.then(all => {
      const each = all as unknown[]
      calls.forEach((call, i) => { call.resolve(each[i] ?? null) })
    }, (error: unknown) => {
      for (const call of calls) call.reject(error)
    })
  }
}
