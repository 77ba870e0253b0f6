import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { decodeTraceExport } from './otlp-protobuf.ts'
import { patient } from './timing.ts'

/** One span as an OTLP/HTTP JSON export carried it, flattened. */
export interface ReceivedSpan {
  readonly service: string
  readonly traceId: string
  readonly spanId: string
  /** '' for a root span. */
  readonly parentSpanId: string
  readonly name: string
  /** OTLP's enum: 1 internal, 2 server, 3 client. */
  readonly kind: number
  readonly attributes: Record<string, string | number | boolean>
  readonly startNs: bigint
  readonly endNs: bigint
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  readonly statusCode: number
  readonly statusMessage: string
}

export interface OtlpReceiver {
  /** The base URL (OTEL_EXPORTER_OTLP_ENDPOINT); spans are POSTed to `${url}/v1/traces`. */
  readonly url: string
  readonly spans: ReceivedSpan[]
  /** Export requests received, with their content types. */
  readonly exports: string[]
  /** Waits until `count` spans satisfy `match` (or fails after `ms`). */
  waitFor: (match: (span: ReceivedSpan) => boolean, count?: number, ms?: number) => Promise<ReceivedSpan[]>
  close: () => Promise<void>
}

interface AnyValue { stringValue?: string, intValue?: number | string, boolValue?: boolean, doubleValue?: number }
interface KeyValue { key: string, value: AnyValue }
interface OtlpSpan {
  traceId: string, spanId: string, parentSpanId?: string, name: string, kind: number, attributes?: KeyValue[],
  startTimeUnixNano: string | number, endTimeUnixNano: string | number, status?: { code?: number, message?: string }
}
interface OtlpExport { resourceSpans: Array<{ resource?: { attributes?: KeyValue[] }, scopeSpans: Array<{ spans: OtlpSpan[] }> }> }

const valueOf = (value: AnyValue): string | number | boolean =>
  value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : value.boolValue ?? value.doubleValue ?? '')

const attributesOf = (list: KeyValue[] | undefined): Record<string, string | number | boolean> =>
  Object.fromEntries((list ?? []).map(({ key, value }) => [key, valueOf(value)]))

export interface OtlpReceiverOptions {
  /** Where to listen (default 127.0.0.1, port 0): a receiver run as a process of its own. */
  port?: number
  host?: string
  /** Takes each export whole instead of decoding it into `spans` and `exports` (a receiver that only counts). */
  onExport?: (body: Buffer, protobuf: boolean) => void
  /** Answers any other request (returns true when it did; else 404), after its body was read. */
  other?: (req: IncomingMessage, res: ServerResponse) => boolean
  /** The status every export gets instead of 200 (a collector failing them): each is counted in `exports`, its spans not kept. */
  failWith?: number
}

/** A real OTLP/HTTP trace receiver on loopback (protobuf and JSON): it decodes what the exporter sends, as a collector would. */
export async function startOtlpReceiver (options: OtlpReceiverOptions = {}): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = []
  const exports: string[] = []
  let changed: () => void = () => {}
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        if (options.other?.(req, res) !== true) res.writeHead(404).end()
        return
      }
      const raw = Buffer.concat(chunks)
      if (options.failWith !== undefined) {
        exports.push(String(req.headers['content-type']))
        res.writeHead(options.failWith, { 'content-type': 'text/plain' }).end('collector failing')
        changed()
        return
      }
      if (options.onExport !== undefined) {
        options.onExport(raw, req.headers['content-type'] === 'application/x-protobuf')
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
        return
      }
      exports.push(String(req.headers['content-type']))
      const body = (req.headers['content-type'] === 'application/x-protobuf' ? decodeTraceExport(raw) : JSON.parse(raw.toString('utf8'))) as OtlpExport
      for (const resource of body.resourceSpans) {
        const service = String(attributesOf(resource.resource?.attributes)['service.name'] ?? '')
        for (const scope of resource.scopeSpans) {
          for (const span of scope.spans) {
            spans.push({
              service,
              traceId: span.traceId,
              spanId: span.spanId,
              parentSpanId: span.parentSpanId ?? '',
              name: span.name,
              kind: span.kind,
              attributes: attributesOf(span.attributes),
              startNs: BigInt(span.startTimeUnixNano),
              endNs: BigInt(span.endTimeUnixNano),
              statusCode: span.status?.code ?? 0,
              statusMessage: span.status?.message ?? ''
            })
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      changed()
    })
  })
  const host = options.host ?? '127.0.0.1'
  await new Promise<void>(resolve => server.listen(options.port ?? 0, host, resolve))
  const url = `http://${host}:${(server.address() as AddressInfo).port}`
  return {
    url,
    spans,
    exports,
    waitFor: async (match, count = 1, ms = 10_000) => {
      const found = (): ReceivedSpan[] => spans.filter(match)
      if (found().length >= count) return found()
      return await new Promise((resolve, reject) => {
        const timer = setTimeout(() => { reject(new Error(`${found().length} of ${count} spans arrived; seen: ${spans.map(s => s.name).join(', ')}`)) }, patient(ms))
        changed = () => {
          if (found().length < count) return
          clearTimeout(timer)
          resolve(found())
        }
      })
    },
    close: async () => {
      server.closeAllConnections()
      await new Promise(resolve => server.close(resolve))
    }
  }
}

/** A W3C traceparent's parts. */
export function parseTraceparent (value: unknown): { traceId: string, parentId: string, flags: string } {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(String(value))
  if (match === null) throw new Error(`not a traceparent: ${String(value)}`)
  return { traceId: match[1] as string, parentId: match[2] as string, flags: match[3] as string }
}
