import t from 'tap'
import { RunStoreUnavailableError } from '../../../src/errors.ts'
import { answerWithin } from '../../../src/runs/store/redis/redis-deadline.ts'

t.test('an answer in time passes through, value or error', async t => {
  t.equal(await answerWithin(Promise.resolve('OK'), 50), 'OK')
  const wrong = new Error('ERR wrong number of arguments')
  await t.rejects(answerWithin(Promise.reject(wrong), 50), wrong)
})

t.test('no answer: RunStoreUnavailableError once the time passed, counted from the call, for each awaited alone', async t => {
  const keepAlive = setInterval(() => {}, 1000) // the deadlines' timer does not hold the process open
  t.teardown(() => { clearInterval(keepAlive) })
  const started = performance.now()
  const never = new Promise<never>(() => {})
  let secondFailed = false
  const first = answerWithin(never, 200).catch((error: unknown) => ({ error, ms: performance.now() - started, secondFailed }))
  await new Promise(resolve => setTimeout(resolve, 150))
  const second = answerWithin(never, 200).catch((error: unknown) => { secondFailed = true; return { error, ms: performance.now() - started } })
  const answered = answerWithin(new Promise(resolve => setTimeout(() => { resolve('late but in time') }, 100)), 200)
  const [a, b] = await Promise.all([first, second])
  t.ok(a.error instanceof RunStoreUnavailableError && b.error instanceof RunStoreUnavailableError)
  t.ok(a.ms >= 200, `the first not before 200 ms after its call (${Math.round(a.ms)})`)
  t.ok(b.ms >= 350 && !a.secondFailed, `the second not before 200 ms after its own (${Math.round(b.ms)}), still awaited when the first failed: not at the first's time`)
  t.equal(await answered, 'late but in time')
})
