// The request line written by hand is byte for byte the line pino writes for the same fields, in
// the same order among the logger's other lines; a logger it does not know gets pino's own.
import t from 'tap'
import { type AccessLine, writeAccessLine } from '../../src/shared/access-line.ts'
import { createLogger } from '../../src/sidecar/logger.ts'

const LINES: Array<[AccessLine, string]> = [
  [{ method: 'POST', path: '/v4/p/a/run', status: 200, duration: 1.234, runId: '0b5c1a3e-5f0e-4a53-9d0c-0d3b3c2f6a11' }, 'request'],
  [{ method: 'GET', path: '/v4/p/a/"quoted"\\back', status: 499, duration: 0.5, runId: 'r-1', aborted: true }, 'request'],
  [{ method: undefined, path: '/v4/p/a/é/ü', status: 503, duration: 10, runId: 'r-2', error: 'queue_full', reason: 'the "queue" is full\n' }, 'request'],
  [{ method: 'GET', path: '/v4/p/a/ws', status: 101, duration: 12000.25, runId: 'r-3' }, 'websocket']
]

/** pino's `time` is the only field that differs between two writes: set it to 0. */
const timeless = (line: string): string => line.replace(/^\{"level":30,"time":\d+,/, '{"level":30,"time":0,')

t.test('the same bytes as pino, interleaved in order with the logger\'s other lines', async t => {
  const byHand: string[] = []
  const logger = createLogger('info', { write: (line: string) => { byHand.push(line) } })
  const byPino: string[] = []
  const reference = createLogger('info', { write: (line: string) => { byPino.push(line) } })
  for (const [line, msg] of LINES) {
    logger.info({ port: 1 }, 'other')
    writeAccessLine(logger, line, msg)
    reference.info({ port: 1 }, 'other')
    reference.info(line, msg)
  }
  t.equal(byHand.length, LINES.length * 2, 'one write per line')
  t.same(byHand.map(timeless), byPino.map(timeless), 'byte for byte, key order included')
  for (const line of byHand) t.match(line, /^\{"level":\d+,"time":\d{13},"name":"app-sidecar",.*\}\n$/)
  t.same(JSON.parse(byHand[3] as string), { level: 30, time: JSON.parse(byHand[3] as string).time, name: 'app-sidecar', ...LINES[1]?.[0], msg: 'request' })
})

t.test('above info nothing is written; a logger made elsewhere writes through pino', async t => {
  const written: string[] = []
  const quiet = createLogger('warn', { write: (line: string) => { written.push(line) } })
  writeAccessLine(quiet, LINES[0]?.[0] as AccessLine, 'request')
  t.same(written, [], 'LOG_LEVEL=warn: no request line')
  const { pino } = await import('pino')
  const other = pino({ base: null, messageKey: 'message' }, { write: (line: string) => { written.push(line) } })
  writeAccessLine(other, LINES[0]?.[0] as AccessLine, 'request')
  t.match(JSON.parse(written[0] as string), { message: 'request', status: 200 }, 'its own formatting applies')
})
