import { readFileSync } from 'node:fs'

/** The package's version, from its package.json (two folders up from src/config and dist/config alike). */
export function packageVersion (): string {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
  return manifest.version
}
