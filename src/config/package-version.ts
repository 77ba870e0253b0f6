import { readFileSync } from 'node:fs'

interface Manifest { version: string, peerDependencies?: Record<string, string> }

/** The package's manifest (two folders up from src/config and dist/config alike). */
function manifest (): Manifest {
  return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as Manifest
}

/** The package's version, from its package.json. */
export function packageVersion (): string {
  return manifest().version
}

/** `npm install` arguments for the package's optional peers whose names start with `prefix`. */
export function peerInstallArguments (prefix: string): string {
  return Object.entries(manifest().peerDependencies ?? {}).filter(([name]) => name.startsWith(prefix)).map(([name, range]) => `${name}@${range}`).join(' ')
}
