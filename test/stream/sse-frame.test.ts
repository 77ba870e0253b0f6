import t from 'tap'
import { createParser } from 'eventsource-parser'
import { doneEventId, frameSseDone, frameSseError, frameSseEvent, SSE_HEARTBEAT } from '../../src/stream/sse-frame.ts'

function parse (text: string): Array<{ event: string | undefined, data: string }> {
  const events: Array<{ event: string | undefined, data: string }> = []
  const parser = createParser({ onEvent: e => events.push({ event: e.event, data: e.data }) })
  parser.feed(text)
  return events
}

t.test('a one-line value is one data line', async t => {
  t.equal(frameSseEvent('{"token":"hi"}'), 'data: {"token":"hi"}\n\n')
  t.equal(frameSseEvent(''), 'data: \n\n')
})

t.test('line breaks of every kind become several data lines of one event', async t => {
  t.equal(frameSseEvent('a\nb'), 'data: a\ndata: b\n\n')
  t.equal(frameSseEvent('a\r\nb\rc\n'), 'data: a\ndata: b\ndata: c\ndata: \n\n')
  t.same(parse(frameSseEvent('a\r\nb\rc')), [{ event: undefined, data: 'a\nb\nc' }])
})

t.test('error events and heartbeats', async t => {
  t.equal(frameSseError('app failed'), 'event: error\ndata: {"message":"app failed"}\n\n')
  t.same(parse(frameSseError('x') + SSE_HEARTBEAT + frameSseEvent('y')), [{ event: 'error', data: '{"message":"x"}' }, { event: undefined, data: 'y' }])
  t.equal(SSE_HEARTBEAT, ': keep-alive\n\n')
})

t.test('the done frame: an id and a blank line, no data, so no event is dispatched; a done event carries the same id', async t => {
  t.equal(frameSseDone('run-1'), 'id: run-1.done\n\n')
  t.same(parse(frameSseEvent('x') + frameSseDone('run-1')), [{ event: undefined, data: 'x' }])
  t.equal(doneEventId('run-1'), 'run-1.done')
  t.equal(frameSseEvent('{}', 'done', doneEventId('run-1')), 'id: run-1.done\nevent: done\ndata: {}\n\n')
})
