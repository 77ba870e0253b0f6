import { readFileSync } from 'node:fs'

// The scripts' Lua, one file per script in lua/ beside this one (copied into dist/ by the build).

const INCLUDE = /^--#include ([\w.-]+\.lua)[ \t]*$/gm

/**
 * The text of `lua/<name>`, each `--#include <file>` line replaced by that file's text (itself
 * expanded), a fragment included once per script however many files ask for it. Every file ends
 * its last line (test/runs/store/redis/lua-headers.test.ts): a batch or an embedding puts `end` after it.
 */
export function luaSource (name: string, included: Set<string> = new Set([name])): string {
  const text = readFileSync(new URL(`./lua/${name}`, import.meta.url), 'utf8')
  return text.replace(INCLUDE, (_line, fragment: string) => {
    if (included.has(fragment)) return ''
    included.add(fragment)
    return luaSource(fragment, included).replace(/\n$/, '')
  })
}
