import { connect, createServer } from 'node:net'

/** Ports this process has handed out: the kernel may offer a just-closed port again, and two servers started one after the other must not get the same. */
const handedOut = new Set<number>()

/**
 * A loopback port nothing listens on (bound and released a moment ago; another process could
 * take it, which is unlikely), never one this process handed out before.
 */
export async function freePort (): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const server = createServer()
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', resolve)
    })
    const address = server.address()
    await new Promise(resolve => server.close(resolve))
    if (address === null || typeof address === 'string') throw new Error('no free port')
    if (handedOut.has(address.port)) continue
    handedOut.add(address.port)
    return address.port
  }
  throw new Error('no free port that was not handed out already')
}

/**
 * A loopback port that refuses connections for the whole test: a privileged one (below 1024)
 * that nothing listens on. A port from {@link freePort} can be bound again by a server in a
 * parallel test file, or be the local port of an outgoing connection (a TCP self-connect), and
 * then a "dead" upstream answers; the ephemeral range never reaches below 1024.
 */
export async function refusedPort (): Promise<number> {
  for (const port of [1, 9, 13, 17]) {
    if (await refuses(port)) return port
  }
  throw new Error('every privileged port tried accepts connections')
}

async function refuses (port: number): Promise<boolean> {
  return await new Promise(resolve => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => { socket.destroy(); resolve(false) })
    socket.once('error', (error: NodeJS.ErrnoException) => { resolve(error.code === 'ECONNREFUSED') })
  })
}
