import { readFile } from 'node:fs/promises'
import { parseArgs } from 'node:util'
import { ConfigError } from '../errors.ts'
import { pathPrefix } from '../shared/url-paths.ts'
import { ID_PATTERN_SOURCE } from './build-schema.ts'
import { loadStoreClientConfig } from './store-config.ts'

/** Where a sub-command reads and writes; the bin passes the process's own streams. */
export interface CommandIo {
  env: NodeJS.ProcessEnv
  stdout: (text: string) => void
  stderr: (text: string) => void
  /** The whole of standard input, for `--file -`. */
  readStdin: () => Promise<string>
}

interface Call { method: string, path: string, body?: string, print?: () => unknown }

/** A usage mistake: exit 2 with one line. */
class UsageError extends Error {}

const ID = new RegExp(ID_PATTERN_SOURCE)
type OptionName = 'project' | 'app' | 'build' | 'file' | 'name' | 'expires-at' | 'id'

const COMMANDS: Record<string, { needs: OptionName[], call: (o: Record<OptionName, string>, io: CommandIo) => Promise<Call> }> = {
  'create-service-account': {
    needs: ['project', 'name', 'expires-at'],
    call: async o => ({
      method: 'POST',
      path: `/v2/projects/${o.project}/service-accounts`,
      body: JSON.stringify({ name: o.name, expiresAt: o['expires-at'] })
    })
  },
  'list-service-accounts': {
    needs: ['project'],
    call: async o => ({ method: 'GET', path: `/v2/projects/${o.project}/service-accounts` })
  },
  'revoke-service-account': {
    needs: ['project', 'id'],
    call: async o => ({ method: 'DELETE', path: `/v2/projects/${o.project}/service-accounts/${o.id}`, print: () => ({ id: o.id, revoked: true }) })
  },
  'put-build': {
    needs: ['project', 'app', 'build', 'file'],
    call: async (o, io) => ({
      method: 'PUT',
      path: `/v2/projects/${o.project}/apps/${o.app}/builds/${o.build}`,
      body: await readBuildFile(o.file, io)
    })
  }
}

/**
 * Runs one admin sub-command (`args` starts with its name) against the store at `STORE_URL` with
 * `ADMIN_TOKEN`; prints the store's JSON answer. Resolves with the exit code: 0 done, 1 the store
 * refused or could not be reached, 2 a usage or configuration mistake. Failures are one line on stderr.
 */
export async function runStoreCommand (args: readonly string[], io: CommandIo): Promise<number> {
  const [name = '', ...rest] = args
  try {
    const command = COMMANDS[name]
    if (command === undefined) throw new UsageError(`unknown command "${name}" (see build-store --help)`)
    const options = parseOptions(rest, command.needs)
    const client = loadStoreClientConfig(io.env)
    const call = await command.call(options, io)
    return await perform(name, call, client.storeUrl, client.adminToken, io)
  } catch (error) {
    const usage = error instanceof UsageError || error instanceof ConfigError
    io.stderr(`build-store: ${usage ? '' : `${name}: `}${(error as Error).message}\n`)
    return usage ? 2 : 1
  }
}

function parseOptions (args: readonly string[], needs: readonly OptionName[]): Record<OptionName, string> {
  let values: Partial<Record<OptionName, string>>
  try {
    const options = Object.fromEntries(needs.map(name => [name, { type: 'string' as const }]))
    values = parseArgs({ args: [...args], options, strict: true, allowPositionals: false }).values
  } catch (error) {
    throw usageErrorOf(error as NodeJS.ErrnoException)
  }
  for (const option of needs) {
    const value = values[option]
    if (value === undefined || value === '') throw new UsageError(`--${option} is required`)
    if (option !== 'name' && option !== 'expires-at' && option !== 'file' && !ID.test(value)) {
      throw new UsageError(`--${option}: expected an id matching ${ID_PATTERN_SOURCE}, got "${value}"`)
    }
  }
  return values as Record<OptionName, string>
}

/** parseArgs's errors, said in this CLI's words (its own name the option). */
function usageErrorOf (error: NodeJS.ErrnoException): UsageError {
  const named = /'(-[^ '<]+)/.exec(error.message)?.[1] ?? ''
  switch (error.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return new UsageError(named.startsWith('--') ? `${named} is not an option of this command` : `unexpected argument "${named}"`)
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': return new UsageError(`${named} needs a value`)
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL': return new UsageError(`unexpected argument "${/'([^']*)'/.exec(error.message)?.[1] ?? ''}"`)
    default: return new UsageError(error.message)
  }
}

async function readBuildFile (file: string, io: CommandIo): Promise<string> {
  try {
    return file === '-' ? await io.readStdin() : await readFile(file, 'utf8')
  } catch (error) {
    throw new UsageError(`--file: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`)
  }
}

async function perform (name: string, call: Call, storeUrl: URL, adminToken: string, io: CommandIo): Promise<number> {
  const url = new URL(pathPrefix(storeUrl) + call.path, storeUrl)
  const headers: Record<string, string> = { authorization: `Bearer ${adminToken}`, accept: 'application/json' }
  if (call.body !== undefined) headers['content-type'] = 'application/json'
  let response: Response
  try {
    response = await fetch(url, { method: call.method, headers, body: call.body, signal: AbortSignal.timeout(30_000) })
  } catch (error) {
    const cause = (error as { cause?: NodeJS.ErrnoException }).cause
    io.stderr(`build-store: ${name}: cannot reach the store at ${storeUrl.origin}: ${cause?.code ?? (error as Error).message}\n`)
    return 1
  }
  const text = await response.text()
  let body: unknown
  try { body = text === '' ? undefined : JSON.parse(text) } catch { body = text }
  if (!response.ok) {
    const message = typeof body === 'object' && body !== null && typeof (body as { message?: unknown }).message === 'string'
      ? (body as { message: string }).message
      : text.slice(0, 200)
    io.stderr(`build-store: ${name}: ${response.status} ${message}\n`)
    return 1
  }
  io.stdout(`${JSON.stringify(call.print?.() ?? body, null, 2)}\n`)
  return 0
}
