import { readdirSync, readFileSync } from 'node:fs'
import t from 'tap'
import { NamedScript } from '../../../../src/runs/store/redis/redis-named-script.ts'
import * as dueScripts from '../../../../src/runs/store/redis/redis-due-scripts.ts'
import * as listScripts from '../../../../src/runs/store/redis/redis-list-scripts.ts'
import * as queueScripts from '../../../../src/runs/store/redis/redis-queue-scripts.ts'
import * as scripts from '../../../../src/runs/store/redis/redis-scripts.ts'

// Every .lua file of the run store opens with a header (its name, KEYS, ARGV and what it returns),
// and that header names what its typed definition builds, in the same order: a header cannot
// drift from the code that calls the script. A file that is no script is a fragment another includes.

const LUA = new URL('../../../../src/runs/store/redis/lua/', import.meta.url)
const files = readdirSync(LUA).filter(name => name.endsWith('.lua')).sort()
const textOf = (file: string): string => readFileSync(new URL(file, LUA), 'utf8')

type Definition = NamedScript<readonly string[], readonly string[], unknown>
const definitions = ([...Object.values(scripts), ...Object.values(dueScripts), ...Object.values(listScripts), ...Object.values(queueScripts)] as unknown[])
  .filter((value): value is Definition => value instanceof NamedScript)

interface Header {
  readonly name: string | undefined
  readonly keys: readonly string[] | undefined
  readonly args: readonly string[] | undefined
  readonly returns: string | undefined
}

/** A header's names as a definition spells them: `run id` is runId, `slots...` stays a list. */
const camel = (words: string): string => words.trim().split(/\s+/).map((word, i) => i === 0 ? word : `${word[0]?.toUpperCase()}${word.slice(1)}`).join('')

/** The header: the comment lines a file opens with. */
function headerOf (text: string): Header {
  const lines: string[] = []
  for (const line of text.split('\n')) {
    if (!line.startsWith('--') || line.startsWith('--#include')) break
    lines.push(line)
  }
  const field = (label: string): string | undefined => lines.find(line => line.startsWith(`-- ${label}: `))?.slice(label.length + 5)
  const names = (label: string): string[] | undefined => {
    const list = field(label)
    return list === undefined ? undefined : list === 'none' ? [] : list.split(',').map(camel)
  }
  return { name: /^-- ([A-Z_]+): /.exec(lines[0] ?? '')?.[1], keys: names('KEYS'), args: names('ARGV'), returns: field('Returns') }
}

t.test('the scan sees the scripts and their definitions', async t => {
  t.ok(files.length >= 28, `${files.length} .lua files`)
  t.ok(definitions.length >= 24, `${definitions.length} definitions`)
  t.same(headerOf('-- KEEP_ANSWER: keeps\n-- KEYS: slot, claims\n-- ARGV: run id, ttl ms, slots...\n-- Returns: 1\nreturn 1\n'),
    { name: 'KEEP_ANSWER', keys: ['slot', 'claims'], args: ['runId', 'ttlMs', 'slots...'], returns: '1' }, 'a header as read')
})

t.test("each definition's file has a header naming its KEYS and ARGV, in order", async t => {
  for (const definition of definitions) {
    t.test(definition.name, async t => {
      t.ok(files.includes(definition.file), `lua/${definition.file} exists`)
      const header = headerOf(textOf(definition.file))
      t.equal(header.name, definition.name, 'its first line names it')
      t.same(header.keys, definition.keys, '-- KEYS: as the definition builds them')
      t.same(header.args, definition.args, '-- ARGV: as the definition builds them')
      t.ok(header.returns !== undefined && header.returns.length > 0, '-- Returns: says what it returns')
    })
  }
})

t.test('a file that is no script is a fragment that another file includes, and has no KEYS or ARGV', async t => {
  const scriptFiles = new Set(definitions.map(definition => definition.file))
  const included = new Set(files.flatMap(file => [...textOf(file).matchAll(/^--#include (\S+)$/gm)].map(match => match[1] as string)))
  for (const file of files.filter(name => !scriptFiles.has(name))) {
    const header = headerOf(textOf(file))
    t.ok(included.has(file), `${file} is included`)
    t.match(textOf(file), new RegExp(`^-- ${file.replaceAll('.', '\\.')}, included: `), `${file} says what it is`)
    t.same([header.keys, header.args], [undefined, undefined], `${file} has no KEYS or ARGV of its own`)
  }
  for (const file of included) t.ok(files.includes(file), `--#include ${file} names a file`)
})

t.test('no comment line opens a Lua long comment (`--[[` would swallow the code after it)', async t => {
  for (const file of files) t.notMatch(textOf(file), /^\s*--\[/m, file)
})

t.test('every file ends its last line (a batch, or END_AND_HOLD, puts `end` right after a script)', async t => {
  for (const file of files) t.ok(textOf(file).endsWith('\n'), file)
})
