import { ConfigError } from '../errors.ts'
import type { EnvParser } from './env-parsers.ts'

/** One Redis endpoint: a server, a sentinel or a cluster seed. */
export interface RedisEndpoint { readonly host: string, readonly port: number }

/**
 * Where a shared run store is (RUN_STORE_URL): one Redis (`redis://`, `rediss://`), the primary
 * a set of sentinels name (`redis+sentinel://h:p,h:p/<master>[/db]`) or a cluster reached through
 * any of its nodes (`redis+cluster://h:p,h:p`). `tls` for the `rediss` forms; `text` is the URL
 * without its password (for logs).
 */
export type RunStoreAddress =
  | { readonly topology: 'single', readonly url: URL, readonly text: string }
  | { readonly topology: 'sentinel', readonly sentinels: readonly RedisEndpoint[], readonly master: string, readonly db: number, readonly credentials: RedisCredentials, readonly tls: boolean, readonly text: string }
  | { readonly topology: 'cluster', readonly nodes: readonly RedisEndpoint[], readonly credentials: RedisCredentials, readonly tls: boolean, readonly text: string }

export interface RedisCredentials { readonly username?: string, readonly password?: string }

const FORMS = 'redis://[user:pass@]host:port[/db], redis+sentinel://[user:pass@]host:port[,host:port…]/<master>[/db] or redis+cluster://[user:pass@]host:port[,host:port…]'

/** RUN_STORE_URL's three forms (and their `rediss` TLS variants); the password never appears in an error. */
export const parseRunStoreAddress: EnvParser<RunStoreAddress> = (name, raw) => {
  const text = raw.trim()
  const scheme = /^([a-z+]+):\/\//i.exec(text)?.[1]?.toLowerCase()
  if (scheme === 'redis' || scheme === 'rediss') return single(name, text)
  if (scheme !== 'redis+sentinel' && scheme !== 'rediss+sentinel' && scheme !== 'redis+cluster' && scheme !== 'rediss+cluster') {
    throw new ConfigError(name, `expected ${FORMS}, got ${scheme === undefined ? 'no URL' : `a ${scheme}:// URL`}`)
  }
  const rest = text.slice(scheme.length + 3)
  // the last '@' ends the credentials, even when a password holds an unencoded '/' (a master name
  // with an '@' must be encoded): no part of a password is ever read as a host
  const at = rest.lastIndexOf('@')
  const credentials = at === -1 ? {} : parseCredentials(name, rest.slice(0, at))
  const afterAuth = rest.slice(at + 1)
  const slash = afterAuth.indexOf('/')
  const hosts = parseEndpoints(name, slash === -1 ? afterAuth : afterAuth.slice(0, slash))
  const path = slash === -1 ? '' : afterAuth.slice(slash)
  const tls = scheme.startsWith('rediss')
  const shown = `${scheme}://${credentials.username !== undefined ? `${encodeURIComponent(credentials.username)}@` : ''}${afterAuth}`
  if (scheme.endsWith('+cluster')) {
    if (path !== '' && path !== '/') throw new ConfigError(name, 'a cluster has no database and no master name: expected redis+cluster://[user:pass@]host:port[,host:port…]')
    return { topology: 'cluster', nodes: hosts, credentials, tls, text: shown }
  }
  const match = /^\/([^/?#]+)(?:\/(\d{1,5}))?\/?$/.exec(path)
  if (match === null) throw new ConfigError(name, 'expected redis+sentinel://[user:pass@]host:port[,host:port…]/<master name>[/db]')
  return { topology: 'sentinel', sentinels: hosts, master: decodeURIComponent(match[1] as string), db: Number(match[2] ?? 0), credentials, tls, text: shown }
}

function single (name: string, text: string): RunStoreAddress {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw new ConfigError(name, `expected ${FORMS}`)
  }
  if (url.hostname === '' || !/^(\/\d{0,5})?$/.test(url.pathname) || url.hash !== '') {
    throw new ConfigError(name, 'expected redis://[user:pass@]host:port[/db] (db a number)')
  }
  const shown = new URL(url.href)
  shown.password = ''
  return { topology: 'single', url, text: shown.href }
}

function parseCredentials (name: string, auth: string): RedisCredentials {
  const colon = auth.indexOf(':')
  try {
    const username = decodeURIComponent(colon === -1 ? auth : auth.slice(0, colon))
    const password = colon === -1 ? undefined : decodeURIComponent(auth.slice(colon + 1))
    return { ...(username === '' ? {} : { username }), ...(password === undefined || password === '' ? {} : { password }) }
  } catch {
    throw new ConfigError(name, 'the user or password is not URL-encoded')
  }
}

function parseEndpoints (name: string, list: string): RedisEndpoint[] {
  const endpoints = list.split(',').map(part => {
    const match = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+):(\d{1,5})$/i.exec(part.trim())
    const port = Number(match?.[2])
    if (match === null || port < 1 || port > 65535) throw new ConfigError(name, `expected host:port, got "${part}"`)
    return { host: (match[1] as string).replace(/^\[(.*)\]$/, '$1'), port }
  })
  if (endpoints.length === 0) throw new ConfigError(name, `expected ${FORMS}`)
  return endpoints
}
