import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { startPrivateRedis } from '../helpers/redis-server.ts'
import { createScratch, type Demo, portsFor, ROOT, runBlock, type Scratch, startDemo } from './block-runner.ts'
import { type BlockSetup, type RunnableBlock, runnableBlocks, outputMismatch } from './doc-blocks.ts'

// Every runnable block of README.md and docs/*.md runs as written (docs/operations.md, "Runnable
// examples"), one after the other on the demo, and the blocks without it one after the other
// beside them: exit 0, its stated output, nothing left running.

const FILES = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter(name => name.endsWith('.md')).sort().map(name => `docs/${name}`)]
const blocks = FILES.flatMap(file => runnableBlocks(readFileSync(join(ROOT, file), 'utf8'), file))

t.test('the examples the docs promise are marked runnable', async t => {
  const covered = (file: string, text: string): boolean => blocks.some(b => b.where.startsWith(`${file}:`) && b.code.includes(text))
  t.ok(covered('README.md', '/v4/demo/example/run'), 'a call')
  t.ok(covered('README.md', '/v4/demo/example/generate'), 'a stream')
  t.ok(covered('README.md', 'webhook-receiver.mjs'), 'the webhook example')
  t.ok(covered('README.md', 'OTEL_EXPORTER_OTLP_ENDPOINT'), 'the tracing example')
  t.ok(covered('docs/runs.md', 'RUN_STORE_URL=redis://'), 'the fleet example')
  t.ok(covered('docs/controlling-work.md', 'Cancel-After: 1'), 'the time limits')
  t.same(blocks.filter(b => /\bnpx\b/.test(b.code)).map(b => b.where), [],
    'runnable blocks run node dist/bin/… (npx costs 2 s a call, and a background npx passes no kill on)')
})

/**
 * The variables of the one demo every block on the demo shares (a demo takes 3 to 10 s to
 * start): all those the blocks name, which must agree.
 */
function sharedDemoEnv (setups: BlockSetup[]): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [name, value] of setups.flatMap(setup => Object.entries(setup.demo ?? {}))) {
    if (env[name] !== undefined && env[name] !== value) throw new Error(`the blocks ask for the demo with ${name}=${env[name]} and ${name}=${value}: one demo serves them all`)
    env[name] = value
  }
  return env
}

/** Runs `block` in `scratch` (on the demo, when one is given) and checks what it promises. */
async function runAndCheck (t: Test, block: RunnableBlock, scratch: Scratch, demo: Demo | undefined): Promise<void> {
  const given = new Map<number, number>()
  if (demo !== undefined) given.set(8000, demo.port).set(9090, demo.adminPort)
  if (block.setup.redis) {
    const redis = await startPrivateRedis(t).catch((error: Error) => error)
    if (redis instanceof Error) {
      const why = `no redis-server to start (install Redis): ${redis.message}`
      if (process.env.CI === 'true') t.fail(why)
      else t.comment(`skipped: ${why}`)
      return
    }
    given.set(6379, Number(new URL(redis.url).port))
  }
  const result = await runBlock(block.code, await portsFor(block.code, given), demo?.env ?? {}, scratch)
  t.equal(result.exit, 0, 'exits 0', { stdout: result.stdout, stderr: result.stderr })
  if (block.expected !== undefined) {
    t.equal(outputMismatch(block.expected, result.stdout), undefined, 'prints the output it states', { stdout: result.stdout, expected: block.expected })
  }
  t.equal(result.leftOver, false, 'stops what it started')
}

t.test('every runnable block runs as written', async t => {
  // the blocks on the demo run one after another on it; the others, each starting what it needs
  // on free ports of its own, run one after another beside them, in a scratch folder of their own
  t.jobs = 2
  t.test('on the one demo', async t => {
    const scratch = createScratch()
    t.teardown(scratch.remove)
    const onDemo = blocks.filter(block => block.setup.demo !== undefined)
    const demoEnv = sharedDemoEnv(onDemo.map(block => block.setup))
    let demo: Demo | undefined
    t.teardown(async () => { await demo?.stop() })
    for (const block of onDemo) {
      await t.test(block.where, async t => {
        demo ??= await startDemo(demoEnv)
        await runAndCheck(t, block, scratch, demo)
      })
    }
  })
  t.test('without the demo', async t => {
    const scratch = createScratch()
    t.teardown(scratch.remove)
    for (const block of blocks.filter(block => block.setup.demo === undefined)) {
      await t.test(block.where, async t => { await runAndCheck(t, block, scratch, undefined) })
    }
  })
})
