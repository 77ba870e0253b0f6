import type { IncomingHttpHeaders } from 'node:http'
import { parseWebhookEndpoint } from '../../webhook/webhook-endpoint.ts'
import type { CallRoute } from './match-route.ts'

/** Where a call asked its webhook to go, and the secret to sign it with. */
export interface WebhookRequest {
  readonly url: URL
  readonly secret: string | undefined
}

/** The request-check stage for webhooks (400 malformed `webhookEndpoint`); undefined when none was asked for. */
export function webhookRequest (route: CallRoute, headers: IncomingHttpHeaders): WebhookRequest | undefined {
  if (route.webhookEndpoint === undefined) return undefined
  const secret = headers['x-webhook-secret']
  return { url: parseWebhookEndpoint(route.webhookEndpoint), secret: typeof secret === 'string' && secret !== '' ? secret : undefined }
}
