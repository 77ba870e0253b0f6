import { MalformedRequestError } from '../errors.ts'

export const MAX_WEBHOOK_URL_LENGTH = 2048

/** Where a webhook goes, and the secret it is signed with (kept only until its delivery ends, never in a record). */
export interface WebhookTarget {
  readonly url: URL
  readonly secret: string | undefined
}

/**
 * Validates a decoded `webhookEndpoint`: an absolute http(s) URL of at most 2048 characters,
 * with a host and without user-info. Anything else is a 400 before the app is called.
 */
export function parseWebhookEndpoint (raw: string): URL {
  if (raw.length > MAX_WEBHOOK_URL_LENGTH) {
    throw new MalformedRequestError(`webhookEndpoint is longer than ${MAX_WEBHOOK_URL_LENGTH} characters`)
  }
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new MalformedRequestError('webhookEndpoint must be an absolute http or https URL')
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new MalformedRequestError('webhookEndpoint must be an absolute http or https URL')
  }
  if (url.username !== '' || url.password !== '' || /^[a-z]+:\/\/[^/?#]*@/i.test(raw)) {
    throw new MalformedRequestError('webhookEndpoint must not carry user-info')
  }
  return url
}
