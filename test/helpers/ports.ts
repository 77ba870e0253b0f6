import { createServer } from 'node:net'

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
