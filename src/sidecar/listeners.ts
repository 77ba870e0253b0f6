import type { Server } from 'node:http'

/**
 * Connections the kernel may hold for a listener before it accepts them. Node's default, 511,
 * overflows when a thousand callers connect at once: the dropped SYNs are retried only after 1, 3,
 * 7 s, and some callers then wait seconds for their first byte. The kernel caps this at
 * net.core.somaxconn (4096 on current Linux).
 */
export const LISTEN_BACKLOG = 4096

/** Listens on `host:port` (0: a free port) with LISTEN_BACKLOG; rejects with the listen error (EADDRINUSE). */
export function listen (server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen({ port, host, backlog: LISTEN_BACKLOG }, () => {
      server.off('error', reject)
      resolve()
    })
  })
}

/**
 * What to add to the line of a listener that could not open: for a port already taken, which
 * variable (of `ports`, by name) to set and how; '' for any other error.
 */
export function portTakenHint (error: NodeJS.ErrnoException & { port?: number }, ports: Readonly<Record<string, number>>): string {
  if (error.code !== 'EADDRINUSE') return ''
  const name = Object.keys(ports).find(name => ports[name] === error.port)
  if (name === undefined) return ` (port ${String(error.port)} is taken)`
  return ` (port ${String(error.port)} is taken: set ${name} to another port, or ${name}=0 for a free one)`
}

/** Stops accepting and resolves once every connection has closed. */
export function closeServer (server: Server): Promise<void> {
  return new Promise(resolve => { server.close(() => { resolve() }) })
}
