const TIMEOUT_CODES = new Set(['ETIMEDOUT', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

/** True when an upstream call failed because a connect, headers or body timer ran out. */
export function isNetworkTimeout (error: Error): boolean {
  return TIMEOUT_CODES.has((error as NodeJS.ErrnoException).code ?? '')
}

/** A short, secret-free description of why an upstream call failed (the app, the store, a webhook receiver). */
export function describeNetworkError (error: Error): string {
  const code = (error as NodeJS.ErrnoException).code
  switch (code) {
    case 'ECONNREFUSED': return 'connection refused'
    case 'ECONNRESET': case 'UND_ERR_SOCKET': return 'connection reset'
    case 'ETIMEDOUT': case 'UND_ERR_CONNECT_TIMEOUT': return 'connect timeout'
    case 'UND_ERR_HEADERS_TIMEOUT': return 'response headers timeout'
    case 'UND_ERR_BODY_TIMEOUT': return 'response body timeout'
    case 'ENOTFOUND': case 'EAI_AGAIN': return 'host not found'
    default: return code ?? error.message
  }
}
