import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import type { IncomingMessage } from 'node:http'

/** The console's cookie: sent back only to the console's own paths, never to a script, never from another site. */
export const CONSOLE_COOKIE = 'sidecar_console'
export const CONSOLE_PATH = '/console'

const digest = (text: string): Buffer => createHash('sha256').update(text).digest()

/**
 * Who may read the console and act on it (docs/console.md, "Access"): the holder of CONSOLE_TOKEN,
 * by `Authorization: Bearer <token>` or by the cookie its login set. The cookie holds a value
 * derived from the token, not the token itself: a new token signs every browser out.
 */
export class ConsoleAccess {
  readonly #token: Buffer
  readonly #session: string

  constructor (token: string) {
    this.#token = digest(token)
    this.#session = createHmac('sha256', token).update('app-sidecar console session').digest('base64url')
  }

  /** Whether `candidate` is the console token (compared in constant time). */
  isToken (candidate: string): boolean {
    return timingSafeEqual(digest(candidate), this.#token)
  }

  /** The request carries the token as a bearer, or the login's cookie. */
  allows (req: IncomingMessage): boolean {
    const authorization = req.headers.authorization
    if (authorization !== undefined && /^bearer /i.test(authorization)) return this.isToken(authorization.slice(7).trim())
    const cookie = cookieValue(req.headers.cookie, CONSOLE_COOKIE)
    return cookie !== undefined && timingSafeEqual(digest(cookie), digest(this.#session))
  }

  /** The Set-Cookie of a login: HttpOnly, SameSite=Strict, scoped to the console's paths. */
  loginCookie (): string {
    return `${CONSOLE_COOKIE}=${this.#session}; Path=${CONSOLE_PATH}; HttpOnly; SameSite=Strict`
  }

  /** The Set-Cookie of a logout: the cookie removed. */
  static logoutCookie (): string {
    return `${CONSOLE_COOKIE}=; Path=${CONSOLE_PATH}; HttpOnly; SameSite=Strict; Max-Age=0`
  }
}

/** The value of cookie `name` in a Cookie header, if it is there. */
function cookieValue (header: string | undefined, name: string): string | undefined {
  if (header === undefined) return undefined
  for (const pair of header.split(';')) {
    const at = pair.indexOf('=')
    if (at !== -1 && pair.slice(0, at).trim() === name) return pair.slice(at + 1).trim()
  }
  return undefined
}

/**
 * An action comes from the console's own page: its `Origin` is the address the request was sent
 * to (scheme http or https, and the `Host` it names). A request without `Origin` is not one.
 */
export function isSameOrigin (req: IncomingMessage): boolean {
  const origin = req.headers.origin
  const host = req.headers.host
  if (origin === undefined || host === undefined) return false
  return origin === `http://${host}` || origin === `https://${host}`
}
