import { isUtf8 } from 'node:buffer'
import { isUtf8Chunks, jsonStringBytes, trimJsonSpace } from '../shared/body-bytes.ts'
import { resultJson } from '../shared/run-result.ts'

/**
 * The cortex envelope of a 2xx body as the buffers to send in order:
 * `{"run_id", "result", "run_time_ms", "timestamp"}`. A body that is JSON (`isJson`, checked as it
 * arrived) is spliced in as sent, its chunks untouched; any other body becomes a JSON string.
 * Nothing is parsed or joined, so the sidecar holds the body about once, not several times.
 */
export function envelopeParts (runId: string, chunks: readonly Buffer[], isJson: boolean, runTimeMs: number, timestamp: string): Buffer[] {
  const head = Buffer.from(envelopeHead(runId))
  const tail = Buffer.from(envelopeTail(runTimeMs, timestamp))
  if (!isUtf8Chunks(chunks)) {
    // rare: undecodable bytes become U+FFFD, as a JSON text would have shown them
    return [head, Buffer.from(resultJson(Buffer.concat(chunks).toString('utf8'))), tail]
  }
  if (isJson) return [head, ...trimJsonSpace(chunks), tail]
  return [head, jsonStringBytes(chunks), tail]
}

/**
 * A small envelope as one string (the body joined once): Node writes a string answer together
 * with its head in one write, where buffers take a copy each and a gathered write.
 */
export function envelopeText (runId: string, body: Buffer, isJson: boolean, runTimeMs: number, timestamp: string): string {
  let result: string
  if (!isUtf8(body)) result = resultJson(body.toString('utf8'))
  else if (!isJson) result = JSON.stringify(body.toString('utf8'))
  else result = (trimJsonSpace([body])[0] as Buffer).toString('utf8') // valid JSON: something is left after trimming
  return envelopeHead(runId) + result + envelopeTail(runTimeMs, timestamp)
}

/** The envelope's text before its result, and after it: one definition for both forms. */
const envelopeHead = (runId: string): string => `{"run_id":${JSON.stringify(runId)},"result":`
const envelopeTail = (runTimeMs: number, timestamp: string): string => `,"run_time_ms":${runTimeMs},"timestamp":"${timestamp}"}`
