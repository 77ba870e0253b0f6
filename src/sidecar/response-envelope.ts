import { resultJson } from '../shared/run-result.ts'

/**
 * Serialises the envelope for a 2xx body. A body that parses as JSON is embedded as it was sent
 * (it is valid JSON, so no re-serialisation is needed); any other body becomes a JSON string.
 */
export function envelopeJson (runId: string, body: Buffer, runTimeMs: number, timestamp: string): string {
  const text = body.toString('utf8')
  return `{"run_id":${JSON.stringify(runId)},"result":${resultJson(text)},"run_time_ms":${runTimeMs},"timestamp":"${timestamp}"}`
}
