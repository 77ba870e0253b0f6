import type { ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { SidecarError, StoreInternalError } from '../errors.ts'

const JSON_TYPE = 'application/json; charset=utf-8'
const INTERNAL = new StoreInternalError()

/** Answers `status` with a JSON text already serialised. */
export function sendJson (res: ServerResponse, status: number, json: string, headers?: Readonly<Record<string, string>>): void {
  res.writeHead(status, headers === undefined
    ? { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(json) }
    : { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(json), ...headers })
  res.end(json)
}

/**
 * Answers with the store's JSON error body; anything not a known error is logged and becomes a
 * 500. A 413 closes the connection, so an oversized body is not read on.
 */
export function sendStoreError (res: ServerResponse, error: unknown, logger: Logger): void {
  let known: SidecarError
  if (error instanceof SidecarError) {
    known = error
  } else {
    logger.error({ err: error }, 'request failed')
    known = INTERNAL
  }
  const headers: Record<string, string> = { ...known.headers }
  if (known.status === 413) headers.connection = 'close'
  sendJson(res, known.status, known.body(), headers)
}
