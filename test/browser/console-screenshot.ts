// Takes the README's screenshot of the console (docs/console.png): the browser tests' scene, a
// minute of mixed traffic from two callers (tokens of two subs) so the charts and the runs list
// have something to show, a streaming run open, the whole page at 1280 wide.
//   node --import tsx test/browser/console-screenshot.ts docs/console.png
import { writeFile } from 'node:fs/promises'
import { consoleScene } from '../helpers/console-page.ts'
import { runsClient, type RunsClient } from '../helpers/runs-client.ts'
import { sleep } from '../helpers/timing.ts'

const out = process.argv[2] ?? 'docs/console.png'
const TRAFFIC_MS = Number(process.env.TRAFFIC_MS ?? 60_000)
const teardowns: Array<() => unknown> = []
const t = { comment: console.log, fail: (why: string) => { throw new Error(why) }, teardown: (fn: () => unknown) => { teardowns.push(fn) } }

try {
  const scene = await consoleScene(t, 1280, 800, { DISABLE_AUTH: 'false' })
  if (scene === undefined) throw new Error('no chromium')
  const { app, h, page } = scene
  const as = async (sub: string): Promise<RunsClient> => runsClient({ base: h.base, project: 'proj', app: 'app', token: await h.issuer.sign('proj', { claims: { sub } }) })
  const [client, batch] = [await as('web-frontend'), await as('nightly-batch')]
  t.comment('traffic…')
  const until = Date.now() + TRAFFIC_MS
  let n = 0
  while (Date.now() < until) {
    const calls = [client.call('/json/predict', { body: '{"prompt":"a cat"}' }), client.call('/json/predict', { body: '{}' })]
    if (n % 3 === 0) calls.push(client.call('/status/422', { body: '{}' }))
    if (n % 11 === 0) calls.push(client.call('/status/503', { body: '{}' }))
    if (n % 4 === 0) calls.push(batch.submit('/json/train', `train-${n}`, { headers: { priority: `u=${n % 8}` } }))
    await Promise.all(calls)
    await sleep(150)
    n++
  }
  t.comment(`${n} rounds; a streaming run and a queue behind it`)
  await client.submit('/ndjson/generate', 'generate-7f3c')
  const stream = await app.waitForHeld(1)
  for (let i = 0; i < 4; i++) await (i % 2 === 0 ? client : batch).submit('/json/train', `queued-${i}`, { headers: { priority: `u=${i % 2 === 0 ? 1 : 3}` } })
  await scene.rowShows('queued-3', 'queued')
  await page.evaluate("document.querySelector('#runs tr[data-run-id=\"generate-7f3c\"] button').click()")
  for (const token of ['Once', ' upon', ' a', ' time']) stream.res.write(`${JSON.stringify({ token })}\n`)
  await page.waitFor("document.querySelectorAll('#run-events li').length === 4", 'the events')
  // the whole page, tiles to run view, at the laptop's width
  await page.resize(1280, await page.evaluate<number>('document.documentElement.scrollHeight'))
  await sleep(1500)
  await writeFile(out, await page.screenshot())
  t.comment(`wrote ${out}`)
  stream.res.end()
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
