import type { ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { StoreInternalError } from '../errors.ts'
import { sendError } from '../shared/http-answers.ts'

export { sendJson } from '../shared/http-answers.ts'

const INTERNAL = new StoreInternalError()

/**
 * Answers with the store's JSON error body; anything not a known error is logged once and
 * becomes a 500. A 413 closes the connection, so an oversized body is not read on.
 */
export function sendStoreError (res: ServerResponse, error: unknown, logger: Logger): void {
  sendError(res, error, { logger, internal: INTERNAL })
}
