import type { Redis } from 'ioredis'
import { luaSource } from './redis-lua-file.ts'
import { LuaScript } from './redis-lua-script.ts'
import { BatchedScript } from './redis-script-batch.ts'

/** A value a script takes in ARGV. */
export type ScriptArg = string | Buffer | number

/**
 * Fields named as a script's header names its KEYS or ARGV, in camelCase (`run id`: runId): a
 * name one value; a name ending in `...` (`slots...`) a list of values in its place.
 */
export type NamedFields<Names extends readonly string[], Value> = {
  readonly [Name in Names[number] as Name extends `${infer List}...` ? List : Name]: Name extends `${string}...` ? readonly Value[] : Value
}

/** What a script is called with: its KEYS and its ARGV, each by name. */
export type ScriptFields<Keys extends readonly string[], Args extends readonly string[]> = NamedFields<Keys, string> & NamedFields<Args, ScriptArg>

/** What a NamedScript is called with. */
export type FieldsOf<Script> = Script extends NamedScript<infer Keys, infer Args, unknown> ? ScriptFields<Keys, Args> : never

/** A script's Lua file, what it takes and how its reply reads. */
export interface ScriptDefinition<Keys extends readonly string[], Args extends readonly string[], Reply> {
  /** As its file's header names it: `KEEP_ANSWER` is lua/keep-answer.lua. */
  readonly name: string
  /** Its KEYS, in order. */
  readonly keys: Keys
  /** Its ARGV, in order. */
  readonly args: Args
  /** Its reply, typed; a reply the script never gives throws. */
  readonly reply: (reply: unknown) => Reply
  /** Calls of one turn run as one (BatchedScript): how many of its first keys are the same for all calls of a slot. */
  readonly batch?: { readonly shared: number }
  /** Bulk replies as Buffers (binary values). */
  readonly buffers?: boolean
  /** Lua run before the file's own: the functions it calls (another script of lua/ as one: luaFunction). */
  readonly prelude?: string
}

/** A field and whether it holds a list of values (`name...`). */
type Slot = readonly [field: string, list: boolean]

const slotsOf = (names: readonly string[]): readonly Slot[] =>
  names.map(name => name.endsWith('...') ? [name.slice(0, -3), true] : [name, false])

/** The Lua file of a script's name: KEEP_ANSWER → keep-answer.lua. */
export const luaFileOf = (name: string): string => `${name.toLowerCase().replaceAll('_', '-')}.lua`

/**
 * A script of lua/ called with named fields (its header's KEYS and ARGV, built into the arrays
 * in its order) and answering a typed reply. It runs as a LuaScript, or a BatchedScript.
 */
export class NamedScript<Keys extends readonly string[], Args extends readonly string[], Reply> {
  readonly name: string
  readonly file: string
  readonly keys: Keys
  readonly args: Args
  /** Its Lua as sent to Redis (includes expanded, the prelude first). */
  readonly source: string
  /** Its reply, typed. */
  readonly parse: (reply: unknown) => Reply
  readonly #keySlots: readonly Slot[]
  readonly #argSlots: readonly Slot[]
  readonly #script: LuaScript | BatchedScript
  readonly #buffers: boolean

  constructor (definition: ScriptDefinition<Keys, Args, Reply>) {
    this.name = definition.name
    this.file = luaFileOf(definition.name)
    this.keys = definition.keys
    this.args = definition.args
    this.parse = definition.reply
    this.source = `${definition.prelude ?? ''}${luaSource(this.file)}`
    this.#keySlots = slotsOf(definition.keys)
    this.#argSlots = slotsOf(definition.args)
    const fields = [...this.#keySlots, ...this.#argSlots].map(([field]) => field)
    if (new Set(fields).size !== fields.length) throw new TypeError(`${this.name}: a field named twice`)
    this.#buffers = definition.buffers === true
    const { batch } = definition
    if (batch === undefined) {
      this.#script = new LuaScript(this.source)
    } else {
      if ([...this.#keySlots, ...this.#argSlots].some(([, list]) => list)) throw new TypeError(`${this.name}: a batched script takes no list`)
      this.#script = new BatchedScript(this.source, { shared: batch.shared, own: definition.keys.length - batch.shared, args: definition.args.length, buffers: this.#buffers })
    }
  }

  /** Its KEYS and ARGV for these fields, in its order. */
  build (fields: ScriptFields<Keys, Args>): { keys: string[], args: ScriptArg[] } {
    const named = fields as Readonly<Record<string, unknown>>
    return { keys: this.#values<string>(this.#keySlots, named), args: this.#values<ScriptArg>(this.#argSlots, named) }
  }

  /** Runs it with these fields: its reply, typed. */
  async call (redis: Redis, fields: ScriptFields<Keys, Args>): Promise<Reply> {
    const { keys, args } = this.build(fields)
    return this.parse(await this.run(redis, keys, args))
  }

  /** Runs it with KEYS and ARGV as built already (as `build` gives them): its reply as Redis gave it. */
  async run (redis: Redis, keys: readonly string[], args: readonly ScriptArg[]): Promise<unknown> {
    const script = this.#script
    if (script instanceof BatchedScript) return await script.run(redis, keys, args)
    return await (this.#buffers ? script.runBuffer(redis, keys, args) : script.run(redis, keys, args))
  }

  /** Its scripts, for loading at connect. */
  get scripts (): readonly LuaScript[] {
    return this.#script instanceof BatchedScript ? this.#script.scripts : [this.#script]
  }

  #values<Value> (slots: readonly Slot[], named: Readonly<Record<string, unknown>>): Value[] {
    const values: Value[] = []
    for (const [field, list] of slots) {
      const value = named[field]
      if (value === undefined) throw new TypeError(`${this.name}: no ${field}`)
      if (list) values.push(...value as readonly Value[])
      else values.push(value as Value)
    }
    return values
  }
}

/**
 * A script of lua/ as a function of another's prelude, `local function <name> (KEYS, ARGV) … end`:
 * the caller passes it KEYS and ARGV of its own (tables), and gets its reply. Its source ends its
 * last line (lua-headers.test.ts), so `end` is a line of its own.
 */
export function luaFunction (name: string, script: { readonly source: string }): string {
  return `local function ${name} (KEYS, ARGV)${script.source}end\n`
}

/** A script of lua/, with its fields' names taken as written (`as const` not needed). */
export function defineScript<const Keys extends readonly string[], const Args extends readonly string[], Reply> (
  definition: ScriptDefinition<Keys, Args, Reply>
): NamedScript<Keys, Args, Reply> {
  return new NamedScript(definition)
}

// Replies as the scripts give them (RESP3: an integer is a number; Lua's false and nil are null).

/** A reply the script does not give: a bug, or a script and its caller out of step. */
export function unexpectedReply (script: string, reply: unknown): TypeError {
  return new TypeError(`${script}: unexpected reply ${JSON.stringify(reply)}`)
}

/** An integer reply among the codes the script gives. */
export function codeReply<const Codes extends readonly number[]> (script: string, reply: unknown, codes: Codes): Codes[number] {
  if (typeof reply === 'number' && codes.includes(reply)) return reply
  throw unexpectedReply(script, reply)
}

/** An integer reply. */
export function integerReply (script: string, reply: unknown): number {
  if (typeof reply === 'number' && Number.isInteger(reply)) return reply
  throw unexpectedReply(script, reply)
}

/** An array reply. */
export function arrayReply (script: string, reply: unknown): readonly unknown[] {
  if (Array.isArray(reply)) return reply
  throw unexpectedReply(script, reply)
}

/** A bulk (or status) reply, as text. */
export function textReply (script: string, reply: unknown): string {
  if (typeof reply === 'string') return reply
  if (Buffer.isBuffer(reply)) return reply.toString()
  throw unexpectedReply(script, reply)
}

/** A bulk reply as bytes (a script run with `buffers`), or null for none (Lua's false). */
export function bytesReply (script: string, reply: unknown): Buffer | null {
  if (reply === null || Buffer.isBuffer(reply)) return reply
  throw unexpectedReply(script, reply)
}

/** An array of bulk replies, as text. */
export function textsReply (script: string, reply: unknown): string[] {
  return arrayReply(script, reply).map(value => textReply(script, value))
}
