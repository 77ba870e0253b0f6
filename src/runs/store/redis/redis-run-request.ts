import type { NewRun, TakenRun } from '../../run-data.ts'
import { parseWebhook } from './redis-context.ts'

// A queued run's request as its hash keeps it: `request` (JSON, without the body) and `body` (raw bytes).

/** The stored request, without its body (kept as raw bytes beside it). */
interface RequestJson { method: string, path: string, headers: string[], hasBody: boolean }

/** The `request` field of a run submitted. */
export function requestJson (run: NewRun): string {
  const request: RequestJson = { method: run.request.method, path: run.request.path, headers: [...run.request.headers], hasBody: run.request.body !== null }
  return JSON.stringify(request)
}

/** A run taken (`unread`), with its request, body and webhook as stored; undefined when its request is gone. */
export function wholeRun (run: TakenRun, request: Buffer | null, body: Buffer | null, webhook: Buffer | null): TakenRun | undefined {
  if (request === null) return undefined
  const req = JSON.parse(request.toString()) as RequestJson
  const { unread: _, ...taken } = run
  return {
    ...taken,
    webhook: webhook === null ? undefined : parseWebhook(webhook.toString()),
    request: { method: req.method, path: req.path, headers: req.headers, body: req.hasBody ? body ?? Buffer.alloc(0) : null }
  }
}
