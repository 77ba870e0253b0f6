// node:crypto and the run-id rule only, and types without Node's: packages/app-sidecar-verify ships this file
// to receivers as a zero-dependency package (test/webhook/verify-package.test.ts installs it on its own).
import { createHmac, timingSafeEqual } from 'node:crypto'
import { isRunId } from '../shared/run-id-rule.ts'

/** `v1,<lowercase hex HMAC-SHA256 of "<runId>.<timestamp>.<body>">`, keyed with the caller's secret. */
export function signWebhook (secret: string, runId: string, timestamp: number | string, body: string | Uint8Array): string {
  return 'v1,' + createHmac('sha256', secret).update(`${runId}.${timestamp}.`).update(body).digest('hex')
}

/** The two signing header names for a brand, lower-case as Node gives them. */
export function signatureHeaderNames (brand: string): { timestamp: string, signature: string } {
  const prefix = `x-${brand.toLowerCase()}-webhook-`
  return { timestamp: `${prefix}timestamp`, signature: `${prefix}signature` }
}

export interface VerifyWebhookOptions {
  /** The word in `X-<Brand>-Webhook-*`: letters, digits and inner dashes (default `Service`). */
  brand?: string
  /** Largest age of the timestamp in seconds, either way: a finite number >= 0 (default 300; 0 turns the check off). */
  toleranceSeconds?: number
}

const HEX_SIGNATURE = /^[0-9a-f]{64}$/
/** The rule WEBHOOK_HEADER_BRAND follows on the sending side. */
const HEADER_BRAND = /^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$/
const DEFAULT_TOLERANCE_SECONDS = 300
const DEFAULT_NAMES = signatureHeaderNames('Service')

interface VerifySettings { readonly names: { timestamp: string, signature: string }, readonly toleranceSeconds: number }

const shown = (value: unknown): string =>
  typeof value === 'string' ? JSON.stringify(value) : typeof value === 'number' ? String(value) : value === null ? 'null' : typeof value

/** The options checked: a wrong one is the receiver's programming error, so it throws instead of reading as "not genuine". */
function verifySettings (options: unknown): VerifySettings {
  if (options === undefined) return { names: DEFAULT_NAMES, toleranceSeconds: DEFAULT_TOLERANCE_SECONDS }
  if (typeof options !== 'object' || options === null) throw new TypeError(`verifyWebhook: options must be an object, got ${shown(options)}`)
  const { brand, toleranceSeconds = DEFAULT_TOLERANCE_SECONDS } = options as Record<string, unknown>
  if (brand !== undefined && (typeof brand !== 'string' || !HEADER_BRAND.test(brand))) {
    throw new TypeError(`verifyWebhook: brand must be letters, digits and inner dashes, got ${shown(brand)}`)
  }
  if (typeof toleranceSeconds !== 'number' || !Number.isFinite(toleranceSeconds) || toleranceSeconds < 0) {
    throw new TypeError(`verifyWebhook: toleranceSeconds must be a finite number >= 0, got ${shown(toleranceSeconds)}`)
  }
  return { names: brand === undefined ? DEFAULT_NAMES : signatureHeaderNames(brand), toleranceSeconds }
}

/**
 * For receivers: whether a delivery's signature is genuine. `headers` as Node gives them
 * (lower-case keys), `body` the raw text or bytes (a Buffer) as received. The run id is read from
 * `X-Request-Id` and must follow the run-id rule. Returns true or false; never throws on a bad
 * or missing signature, headers, body or secret (an empty secret is never genuine). Throws a
 * TypeError for bad `options`.
 */
export function verifyWebhook (secret: string, headers: Readonly<Record<string, string | string[] | undefined>>,
  body: string | Uint8Array, options?: VerifyWebhookOptions): boolean {
  const { names, toleranceSeconds } = verifySettings(options)
  try {
    if (typeof secret !== 'string' || secret === '') return false
    const runId = headers['x-request-id']
    const timestampText = headers[names.timestamp]
    const signature = headers[names.signature]
    if (!isRunId(runId) || typeof timestampText !== 'string' || typeof signature !== 'string') return false
    if (!/^\d{1,12}$/.test(timestampText)) return false
    if (toleranceSeconds > 0 && Math.abs(Date.now() / 1000 - Number(timestampText)) > toleranceSeconds) return false
    const comma = signature.indexOf(',')
    if (comma === -1 || signature.slice(0, comma) !== 'v1') return false
    const given = signature.slice(comma + 1)
    if (!HEX_SIGNATURE.test(given)) return false
    const expected = signWebhook(secret, runId, timestampText, body).slice(3)
    return timingSafeEqual(Buffer.from(given, 'latin1'), Buffer.from(expected, 'latin1'))
  } catch {
    return false
  }
}
