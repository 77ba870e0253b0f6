import { resultJson } from '../shared/run-result.ts'

/**
 * The result of one response, kept for its webhook (the tee) and for its run's record: the body
 * bytes, or the values of the events sent, bounded (WEBHOOK_MAX_BODY_BYTES for a webhook). Past
 * the bound nothing more is kept and the delivery says `"result": null, "truncated": true`.
 */
export class ResultCapture {
  readonly #maxBytes: number
  #chunks: Buffer[] = []
  #events: string[] | undefined
  #size = 0
  #truncated = false
  /** The status the caller got (200 for a stream). */
  status = 0

  constructor (maxBytes: number) {
    this.#maxBytes = maxBytes
  }

  get truncated (): boolean { return this.#truncated }

  body (chunk: Buffer): void {
    if (this.#keep(chunk.length)) this.#chunks.push(chunk)
  }

  event (data: string): void {
    this.#events ??= []
    if (this.#keep(Buffer.byteLength(data))) this.#events.push(data)
  }

  /** Replaces what was kept with the sidecar's own answer (a 502 or 504 body). */
  replace (status: number, body: string): void {
    this.status = status
    this.#chunks = [Buffer.from(body)]
    this.#events = undefined
    this.#size = body.length
    this.#truncated = false
  }

  /** Bytes kept, for bounding what is pending. */
  get size (): number { return this.#size }

  /** `result` as JSON text: the parsed body (or text), or the array of event values, or null when truncated. */
  resultJson (): string {
    if (this.#truncated) return 'null'
    if (this.#events !== undefined) return `[${this.#events.map(resultJson).join(',')}]`
    return resultJson(Buffer.concat(this.#chunks).toString('utf8'))
  }

  #keep (bytes: number): boolean {
    if (this.#truncated) return false
    this.#size += bytes
    if (this.#size <= this.#maxBytes) return true
    this.#truncated = true
    this.#chunks = []
    this.#events = undefined
    this.#size = 0
    return false
  }
}

/** The body POSTed to a webhook: `{"run_id","status_code","result","run_time_ms","timestamp"}` (+ `"truncated": true`). */
export function webhookBody (runId: string, capture: ResultCapture, runTimeMs: number, timestamp: string): string {
  return webhookJson(runId, capture.status, capture.resultJson(), runTimeMs, timestamp, capture.truncated)
}

/**
 * The webhook body of a recorded run, from its result as JSON text: past `maxBytes`
 * (WEBHOOK_MAX_BODY_BYTES) it says `"result": null, "truncated": true`, as for a call.
 */
export function runWebhookBody (runId: string, statusCode: number, resultJson: string, runTimeMs: number, timestamp: string, maxBytes: number): string {
  const truncated = Buffer.byteLength(resultJson) > maxBytes
  return webhookJson(runId, statusCode, truncated ? 'null' : resultJson, runTimeMs, timestamp, truncated)
}

function webhookJson (runId: string, statusCode: number, resultJson: string, runTimeMs: number, timestamp: string, truncated: boolean): string {
  return `{"run_id":${JSON.stringify(runId)},"status_code":${statusCode},"result":${resultJson},"run_time_ms":${runTimeMs},"timestamp":"${timestamp}"${truncated ? ',"truncated":true' : ''}}`
}
