import t from 'tap'
import { movePorts } from './block-runner.ts'
import { outputMismatch, runnableBlocks } from './doc-blocks.ts'

// What counts as a runnable block and its stated output, and how that output is compared.

const page = [
  '# A page',
  '',
  '```sh',
  'echo not marked',
  '```',
  '',
  '<!-- runnable: demo WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8 -->',
  '```sh',
  'echo one',
  '```',
  '',
  '```text',
  'one',
  '```',
  '',
  '<!-- runnable: redis -->',
  '```bash',
  'echo two',
  '```',
  '',
  'Some prose, then a block that is not its output:',
  '',
  '```text',
  'two',
  '```',
  '',
  '````md',
  '<!-- runnable -->',
  '```sh',
  'echo inside a fence: an example of the convention, not a block',
  '```',
  '````'
].join('\n')

t.test('marked sh and bash blocks, their setup, and the text block right after as their output', async t => {
  t.same(runnableBlocks(page, 'page.md'), [
    { where: 'page.md:8', setup: { demo: { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' }, redis: false }, code: 'echo one', expected: 'one' },
    { where: 'page.md:17', setup: { redis: true }, code: 'echo two' }
  ])
})

t.test('a marker must stand on a sh block, with words it knows', async t => {
  t.throws(() => runnableBlocks('<!-- runnable -->\n\n```sh\necho\n```', 'a.md'), /a\.md:2: a runnable marker must stand right above a sh or bash block/)
  t.throws(() => runnableBlocks('<!-- runnable -->\n```js\n1\n```', 'a.md'), /must stand right above a sh or bash block/)
  t.throws(() => runnableBlocks('<!-- runnable: docker -->\n```sh\necho\n```', 'a.md'), /a\.md:2: unknown word in the runnable marker: docker/)
  t.throws(() => runnableBlocks('<!-- runnable: X=1 -->\n```sh\necho\n```', 'a.md'), /unknown word in the runnable marker: X=1/, 'variables belong to the demo')
  t.throws(() => runnableBlocks('<!-- runnable -->\n```sh\necho', 'a.md'), /a\.md:2: a fenced block that never closes/)
})

t.test('output: lines in order, … for any text in a line, a line of … for any lines', async t => {
  t.equal(outputMismatch('a\nb', '\na  \r\nb\n\n'), undefined, 'trailing spaces and blank edge lines aside')
  t.equal(outputMismatch('{"id":"…","n":1}', '{"id":"x-1","n":1}'), undefined)
  t.equal(outputMismatch('{"id":"…","n":1}', '{"id":"x-1","n":2}'), 'no output line matches expected line 1: {"id":"…","n":1}')
  t.equal(outputMismatch('a (b)', 'a b'), 'no output line matches expected line 1: a (b)', 'the rest of a line is literal')
  t.equal(outputMismatch('a\n…\nz', 'a\nz'), undefined, 'a line of … may stand for none')
  t.equal(outputMismatch('a\n…\nz', 'a\nb\nc\nz'), undefined)
  t.equal(outputMismatch('a\n…\nz', 'a\nb\nc'), 'no output line matches expected line 3: z')
  t.equal(outputMismatch('a\nb', 'a\n\nb'), 'no output line matches expected line 2: b', 'a blank line inside counts')
  t.equal(outputMismatch('a', 'a\nb'), 'more output than expected')
  t.equal(outputMismatch('…\nb\n…', 'b\nb\nb'), undefined)
})

t.test('ports: whole numbers among the documented ports, as the docs write them', async t => {
  const ports = new Map([[8000, 41000], [3000, 41001], [6379, 41002]])
  t.equal(movePorts('curl http://127.0.0.1:8000/v4/x?webhookEndpoint=http%3A%2F%2F127.0.0.1%3A3000%2Fhook', ports),
    'curl http://127.0.0.1:41000/v4/x?webhookEndpoint=http%3A%2F%2F127.0.0.1%3A41001%2Fhook')
  t.equal(movePorts('PORT=8000 node a.js; }).listen(3000, \'127.0.0.1\'); redis://127.0.0.1:6379/0', ports),
    'PORT=41000 node a.js; }).listen(41001, \'127.0.0.1\'); redis://127.0.0.1:41002/0')
  t.equal(movePorts('delay_ms=30000 v1.8000 80001 x8000 18000', ports), 'delay_ms=30000 v1.8000 80001 x8000 18000', 'not inside other numbers or words')
})
