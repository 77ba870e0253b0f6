import { parseWebhookEndpoint, type WebhookTarget } from '../webhook/webhook-endpoint.ts'
import type { HttpCall } from './http-call.ts'

/** The request-check stage for webhooks (400 malformed `webhookEndpoint`); undefined when none was asked for. */
export function webhookTarget (call: HttpCall): WebhookTarget | undefined {
  const endpoint = call.route.webhookEndpoint
  if (endpoint === undefined) return undefined
  const secret = call.req.headers['x-webhook-secret']
  return { url: parseWebhookEndpoint(endpoint), secret: typeof secret === 'string' && secret !== '' ? secret : undefined }
}
