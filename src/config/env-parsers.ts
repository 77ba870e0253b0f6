import { isIP } from 'node:net'
import type ipaddr from 'ipaddr.js'
import { ConfigError } from '../errors.ts'
import { requireCjs } from '../shared/require-cjs.ts'

const { parseCIDR } = requireCjs('ipaddr.js') as typeof ipaddr

/** pino's levels, for LOG_LEVEL (both programs). */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
export type LogLevel = typeof LOG_LEVELS[number]

/** Turns one raw environment value into a typed value, or throws a ConfigError naming the variable. */
export type EnvParser<T> = (name: string, raw: string) => T

const BOOLEAN_WORDS: Record<string, boolean> = {
  true: true, '1': true, yes: true, on: true, false: false, '0': false, no: false, off: false
}

export const parseBoolean: EnvParser<boolean> = (name, raw) => {
  const value = BOOLEAN_WORDS[raw.trim().toLowerCase()]
  if (value === undefined) throw new ConfigError(name, `expected true or false, got "${raw}"`)
  return value
}

/** A whole number in [min, max]. */
export function integerIn (min: number, max: number): EnvParser<number> {
  return (name, raw) => {
    const text = raw.trim()
    const value = Number(text)
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value < min || value > max) {
      throw new ConfigError(name, `expected a whole number from ${min} to ${max}, got "${raw}"`)
    }
    return value
  }
}

/** A non-negative decimal number of at most `max`. */
export function numberUpTo (max: number): EnvParser<number> {
  return (name, raw) => {
    const text = raw.trim()
    const value = Number(text)
    if (!/^\d+(\.\d+)?$/.test(text) || value > max) {
      throw new ConfigError(name, `expected a number from 0 to ${max}, got "${raw}"`)
    }
    return value
  }
}

export const parsePort: EnvParser<number> = integerIn(0, 65535)

/** An absolute http(s) URL without user-info, query or fragment (env-table.ts pathPrefix/underUrl join paths to it). */
export const parseHttpUrl: EnvParser<URL> = (name, raw) => {
  let url: URL
  try {
    url = new URL(raw.trim())
  } catch {
    throw new ConfigError(name, `expected an absolute http:// or https:// URL, got "${raw}"`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(name, `expected an http:// or https:// URL, got "${raw}"`)
  }
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '') {
    throw new ConfigError(name, `expected a URL without credentials, query or fragment, got "${raw}"`)
  }
  return url
}

export function oneOf<T extends string> (choices: readonly T[]): EnvParser<T> {
  return (name, raw) => {
    const value = raw.trim() as T
    if (!choices.includes(value)) {
      throw new ConfigError(name, `expected one of ${choices.join(', ')}, got "${raw}"`)
    }
    return value
  }
}

const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/** A project id or app name, as the routes accept them. */
export const parseId: EnvParser<string> = (name, raw) => {
  if (!ID_PATTERN.test(raw)) {
    throw new ConfigError(name, `expected an id matching ${ID_PATTERN.source}, got "${raw}"`)
  }
  return raw
}

/** A bearer token (RFC 6750 token68 characters); the value itself never appears in an error. */
export const parseBearerToken: EnvParser<string> = (name, raw) => {
  if (!/^[A-Za-z0-9\-._~+/]+=*$/.test(raw)) throw new ConfigError(name, 'expected a bearer token (letters, digits, -._~+/)')
  return raw
}

/** An app HTTP path such as `/health`. */
export const parseHttpPath: EnvParser<string> = (name, raw) => {
  if (!/^\/[\x21-\x7e]*$/.test(raw)) {
    throw new ConfigError(name, `expected an absolute path starting with "/", got "${raw}"`)
  }
  return raw
}

/** The word in `X-<Brand>-Webhook-…` header names. */
export const parseHeaderBrand: EnvParser<string> = (name, raw) => {
  if (!/^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$/.test(raw)) {
    throw new ConfigError(name, `expected letters, digits and inner dashes, got "${raw}"`)
  }
  return raw
}

/** CORS_ALLOWED_ORIGINS: `*` (any origin), or the origins named, each as a browser sends it (`https://app.example.com`). */
export type AllowedOrigins = '*' | readonly string[]

/**
 * A comma-separated list of http(s) origins, or `*`. Each is kept as a browser's `Origin` header
 * would spell it (scheme and host lower-case, no default port, no trailing slash).
 */
export const parseOriginList: EnvParser<AllowedOrigins> = (name, raw) => {
  const parts = raw.split(',').map(part => part.trim()).filter(part => part !== '')
  if (parts.length === 1 && parts[0] === '*') return '*'
  if (parts.length === 0 || parts.includes('*')) throw new ConfigError(name, `expected * alone, or origins like https://app.example.com, got "${raw}"`)
  return parts.map(part => {
    let url: URL | undefined
    try { url = new URL(part) } catch {}
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.username !== '' || url.password !== '' ||
        url.pathname !== '/' || /[?#]/.test(part)) {
      throw new ConfigError(name, `expected origins like https://app.example.com (scheme, host and port only), got "${part}"`)
    }
    return url.origin
  })
}

export interface Cidr { readonly address: string, readonly prefix: number, readonly family: 4 | 6 }

/** A comma-separated list of CIDR ranges such as `127.0.0.0/8,fd00::/8` (addresses in their standard form only). */
export const parseCidrList: EnvParser<Cidr[]> = (name, raw) => {
  return raw.split(',').map(part => part.trim()).filter(part => part !== '').map(part => {
    const slash = part.indexOf('/')
    let range: [ipaddr.IPv4 | ipaddr.IPv6, number]
    try {
      // ipaddr.js also reads hex and octal IPv4 forms: isIP keeps to the standard ones
      if (isIP(part.slice(0, slash)) === 0) throw new Error('not a standard address')
      range = parseCIDR(part)
    } catch {
      throw new ConfigError(name, `expected CIDR ranges like 127.0.0.0/8, got "${part}"`)
    }
    return { address: range[0].toString(), prefix: range[1], family: range[0].kind() === 'ipv6' ? 6 : 4 }
  })
}
