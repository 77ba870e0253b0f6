import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'

// The repository's files as the architecture and docs tests read them.

/** Every file below `dir` (an absolute path) whose name ends with `ending`, as absolute paths. */
export function filesUnder (dir: string, ending = '.ts'): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return filesUnder(path, ending)
    return entry.name.endsWith(ending) ? [path] : []
  })
}

// static and type imports, re-exports, and import('…')
const RELATIVE_IMPORT = /(?:^\s*(?:import|export)\s[^'"]*?from\s+|\bimport\()['"](\.[^'"]+)['"]/gm

/** What `file` (an absolute path) imports by a relative specifier, as absolute paths (existing or not). */
export function relativeImports (file: string): string[] {
  return [...readFileSync(file, 'utf8').matchAll(RELATIVE_IMPORT)].map(match => resolve(dirname(file), match[1] as string))
}
