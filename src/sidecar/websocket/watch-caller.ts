import { CallerGoneError } from '../../errors.ts'
import type { UpgradeCall } from '../../call/upgrade-call.ts'

/** Most bytes a caller may send before its upgrade is answered; beyond it the connection is cut. */
const EARLY_BYTES_LIMIT = 64 * 1024

export interface WatchedCaller {
  /** Stops reading; returns `head` with the bytes the caller sent meanwhile, for the app. */
  stop: (head: Buffer) => Buffer
}

/**
 * Reads an upgrade's socket while the upgrade is checked and waits for a slot: Node pauses it, so
 * a caller's FIN would go unseen until a slot freed. A caller that half-closes is leaving: the
 * call aborts and the socket closes. Bytes sent meanwhile are kept for the app.
 */
export function watchCaller (call: UpgradeCall): WatchedCaller {
  const { socket } = call
  const early: Buffer[] = []
  let bytes = 0
  let watching = true
  const onData = (chunk: Buffer): void => {
    bytes += chunk.length
    if (bytes > EARLY_BYTES_LIMIT) socket.destroy()
    else early.push(chunk)
  }
  const onEnd = (): void => {
    call.abort(new CallerGoneError())
    socket.destroy()
  }
  socket.on('data', onData)
  socket.once('end', onEnd)
  return {
    stop: head => {
      if (watching) {
        watching = false
        socket.pause()
        socket.off('data', onData)
        socket.off('end', onEnd)
      }
      return early.length === 0 ? head : Buffer.concat([head, ...early])
    }
  }
}
