import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Logger } from 'pino'
import { knownError, writeRawError } from '../shared/http-answers.ts'
import { SIDECAR_INTERNAL } from '../errors.ts'
import { type CallRecorder, CallRecord } from './call-record.ts'

/** A WebSocket upgrade: its answer is the app's 101 (or refusal), or the sidecar's error on the raw socket. */
export class UpgradeCall extends CallRecord {
  readonly socket: Duplex
  /** The status of the answer the caller got (0: none yet). */
  answered = 0
  readonly #logger: Logger

  constructor (recorder: CallRecorder, req: IncomingMessage, socket: Duplex) {
    super(recorder, 'websocket', req, socket)
    socket.on('error', ignoreSocketError) // 'close' follows, and ends the call
    this.socket = socket
    this.#logger = recorder.logger
  }

  get status (): number { return this.answered === 0 ? 499 : this.answered }
  get finished (): boolean { return this.answered !== 0 }
  get settled (): boolean { return this.socket.destroyed || this.answered !== 0 }

  answer (error: unknown): void {
    if (this.settled) return
    const known = knownError(error, { runId: this.runId, logger: this.#logger, internal: SIDECAR_INTERNAL })
    this.refusal = known
    this.answered = known.status
    writeRawError(this.socket, known, this.runId)
  }
}

function ignoreSocketError (): void {}
