/** Longest wait for one request-path command's answer before the run store counts as unavailable (a 503 within 2 s). */
export const COMMAND_TIMEOUT_MS = 1500

/**
 * Error replies a Redis deployment gives while it cannot serve (not a wrong command): a demoted
 * primary (READONLY), a failover or a primary without its replicas (MASTERDOWN, NOREPLICAS), a
 * resharding or a cluster down (MOVED, ASK, TRYAGAIN, CROSSSLOT, CLUSTERDOWN), a server loading
 * its data, out of memory, busy in a script or failing to persist (LOADING, OOM, BUSY, MISCONF),
 * a script it lost (NOSCRIPT), credentials it refuses (NOAUTH, WRONGPASS); a queue's consumer
 * group missing (NOGROUP: the scripts create it before they use it, so only a replica, where the
 * creation is refused, or a server that lost its data meanwhile answers so).
 */
const UNAVAILABLE_CODES = new Set([
  'READONLY', 'MASTERDOWN', 'NOREPLICAS', 'MOVED', 'ASK', 'TRYAGAIN', 'CROSSSLOT', 'CLUSTERDOWN',
  'LOADING', 'OOM', 'BUSY', 'MISCONF', 'NOSCRIPT', 'NOAUTH', 'WRONGPASS', 'NOGROUP'
])

/** An error reply as ioredis rejects with it; EXECABORT carries the replies that aborted the transaction. */
export interface ReplyLike { readonly message: string, readonly previousErrors?: readonly ReplyLike[] }

/**
 * The code of a deployment's error reply (`READONLY`, `OOM`, …), else undefined (a bug). A
 * script's write refused carries the refusal's code: first (`OOM command not allowed … script: …`),
 * or after `-` inside an `ERR Error running script` (older servers).
 */
export function unavailableReply (error: ReplyLike): string | undefined {
  const code = /^[A-Z]+/.exec(error.message)?.[0]
  if (code !== undefined && UNAVAILABLE_CODES.has(code)) return code
  if (code === 'EXECABORT') return error.previousErrors?.map(unavailableReply).find(found => found !== undefined)
  if (code === 'ERR' && error.message.includes('script')) {
    for (const [, inner] of error.message.matchAll(/-([A-Z]+) /g)) if (inner !== undefined && UNAVAILABLE_CODES.has(inner)) return inner
  }
  return undefined
}

/**
 * ioredis's reconnectOnError: a demoted primary's connection (READONLY), or one that has lost its
 * replicas and refuses writes (NOREPLICAS, `min-replicas-to-write`: a primary cut off from the
 * rest, about to be replaced), is dropped and made again (the command fails, 503); with Sentinel,
 * the sentinels are asked again.
 */
export function reconnectOnReadonly (error: Error): 1 | false {
  return error.message.startsWith('READONLY') || error.message.startsWith('NOREPLICAS') ? 1 : false
}

/** What the client library says when it cannot reach Redis, in plain words (by error code, then by its wording). */
const PLAIN_CODES: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  EPIPE: 'connection reset',
  ETIMEDOUT: 'connection timed out',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host not found',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable'
}
const PLAIN_MESSAGES: ReadonlyArray<[RegExp, string]> = [
  [/^Stream isn't writeable|^Connection is closed/, 'not connected'],
  [/All sentinels are unreachable/, 'no sentinel reachable'],
  [/Failed to refresh slots cache|None of startup nodes is available/, 'no cluster node reachable'],
  [/^(NOAUTH|WRONGPASS)|invalid username-password/, 'credentials refused'],
  [/DB index is out of range/, 'the server has no such database'],
  [/Command timed out/, 'no answer in time']
]

/**
 * Why Redis could not be used, in plain words (for logs and a 503's reason): a network failure,
 * a connection not made, credentials refused, a deployment's refusal (its code: `LOADING`, …).
 */
export function plainWords (error: Error): string {
  const byCode = PLAIN_CODES[(error as NodeJS.ErrnoException).code ?? '']
  if (byCode !== undefined) return byCode
  for (const [wording, words] of PLAIN_MESSAGES) if (wording.test(error.message)) return words
  const refusal = unavailableReply(error)
  if (refusal !== undefined) return `the server answered ${refusal}`
  return error.message.split('\n')[0] as string
}
