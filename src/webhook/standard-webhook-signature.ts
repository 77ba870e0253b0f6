import { createHmac } from 'node:crypto'

/**
 * The Standard Webhooks signature (https://www.standardwebhooks.com): `v1,<base64 HMAC-SHA256 of
 * "<id>.<timestamp>.<body>">`. A secret of the form `whsec_<base64>` is keyed with its decoded
 * bytes, as the standard's libraries do; any other secret with its UTF-8 bytes.
 */
export function signStandardWebhook (secret: string, id: string, timestamp: number, body: string | Buffer): string {
  const key = secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8')
  return 'v1,' + createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64')
}
