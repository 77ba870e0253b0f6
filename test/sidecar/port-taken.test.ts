import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { listen, portTakenHint } from '../../src/sidecar/listeners.ts'

// The EADDRINUSE line of the bare bin says which variable to set (test/bin/app-sidecar.test.ts
// reads it from the real process); here the hint itself, from a real listen error.

t.test('portTakenHint: the variable whose port is taken, or nothing for another error', async t => {
  const busy = createServer()
  await listen(busy, 0, '127.0.0.1')
  t.teardown(() => { busy.close() })
  const port = (busy.address() as AddressInfo).port
  const second = createServer()
  const error = await listen(second, port, '127.0.0.1').then(() => undefined, (caught: NodeJS.ErrnoException) => caught)
  t.equal(error?.code, 'EADDRINUSE')
  const taken = error as NodeJS.ErrnoException & { port?: number }
  t.equal(portTakenHint(taken, { PORT: port, ADMIN_PORT: 9090 }), ` (port ${port} is taken: set PORT to another port, or PORT=0 for a free one)`)
  t.equal(portTakenHint(taken, { PORT: 8000, ADMIN_PORT: port }), ` (port ${port} is taken: set ADMIN_PORT to another port, or ADMIN_PORT=0 for a free one)`)
  t.equal(portTakenHint(taken, { PORT: 8000 }), ` (port ${port} is taken)`, 'a port no variable names')
  t.equal(portTakenHint(Object.assign(new Error('permission denied'), { code: 'EACCES', port: 80 }), { PORT: 80 }), '', 'another error: no hint')
})
