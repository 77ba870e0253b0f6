import type { Test } from 'tap'
import { sendRaw } from '../../helpers/http-client.ts'
import { ADMIN, JSON_TYPE, messageBody, type SuiteContext } from './context.ts'

const MALFORMED = (segment: string) => `malformed path segment "${segment}": ids match [A-Za-z0-9][A-Za-z0-9._-]{0,127}`
const TEN_MB = 10 * 1024 * 1024

/** Every bad input of the issue: a clear 4xx, nothing written. Also unknown routes and methods. */
export function badInputTests (t: Test, ctx: SuiteContext): void {
  const { main } = ctx

  t.test('malformed ids on the raw path are 400 before anything else (no token needed to learn it)', async t => {
    const p = ctx.project()
    const cases: Array<[string, string]> = [
      [`/v2/projects/${p}/apps/app/builds/..`, '..'],
      [`/v2/projects/${p}/apps/app/builds/.`, '.'],
      [`/v2/projects/${p}/apps/app/builds/a%2Fb`, 'a%2Fb'],
      [`/v2/projects/${p}/apps/app/builds/%2F`, '%2F'],
      [`/v2/projects/${p}/apps/../builds/b`, '..'],
      [`/v2/projects/../apps/app/builds/b`, '..'],
      [`/v2/projects/${p}/apps/app/builds/../../../service-accounts`, '..'],
      [`/v2/projects/${p}/apps/app/builds/-b`, '-b'],
      [`/v2/projects/${p}/apps/app/builds/b%00`, 'b%00'],
      [`/v2/projects/${p}/apps/app/builds/`, ''],
      [`/v2/projects/${p}//app/builds/b`, ''],
      [`/v2/projects/${p}/apps/app/builds/${'x'.repeat(129)}`, `${'x'.repeat(64)}…`],
      [`/v2/projects/${p}/service-accounts/..`, '..'],
      [`/v2/projects/.../service-accounts`, '...']
    ]
    for (const [path, segment] of cases) {
      for (const method of ['GET', 'PUT', 'DELETE']) {
        const r = await main.request(path, { method, headers: ADMIN, body: method === 'PUT' ? '{}' : undefined })
        t.equal(r.status, 400, `${method} ${path}`)
        t.equal(r.headers['content-type'], JSON_TYPE)
        t.same(r.json(), messageBody(MALFORMED(segment)), `${method} ${path}`)
      }
    }
    const noToken = await main.request(`/v2/projects/${p}/apps/app/builds/..`)
    t.equal(noToken.status, 400)
    t.equal((await main.request(`/v2/projects/${p}/apps/app/builds/${'x'.repeat(128)}`, { headers: ADMIN })).status, 404, '128 characters is still an id')
    const [{ count } = { count: -1 }] = await ctx.backend.database.query<{ count: number }>('SELECT count(*)::int AS count FROM builds WHERE project_id = $1', [p])
    t.equal(count, 0, 'nothing written')
  })

  t.test('PUT bodies that are refused with 400, writing nothing', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/b`
    const cases: Array<[string, string, string]> = [
      ['invalid JSON', '{"status": "ok",}', 'invalid JSON: '],
      ['not JSON at all', 'status=ok', 'invalid JSON: '],
      ['an empty body', '', 'invalid JSON: the body is empty'],
      ['an array', '[{"status":"ok"}]', 'invalid build: the body must be a JSON object'],
      ['null', 'null', 'invalid build: the body must be a JSON object'],
      ['a string', '"ok"', 'invalid build: the body must be a JSON object'],
      ['an unknown field', '{"status":"ok","color":"blue"}', 'invalid build: unknown field "color"'],
      ['a snake_case field', '{"build_time_ms":"12"}', 'invalid build: unknown field "build_time_ms"'],
      ['__proto__', '{"__proto__":{"admin":true}}', 'invalid build: unknown field "__proto__"'],
      ['buildTimeMs a number', '{"buildTimeMs":12}', 'invalid build: buildTimeMs: expected string'],
      ['buildTimeMs not digits', '{"buildTimeMs":"12ms"}', 'invalid build: buildTimeMs: expected string to match \'^[0-9]+$\''],
      ['initTimeMs a number', '{"initTimeMs":5}', 'invalid build: initTimeMs: expected string'],
      ['port a string', '{"port":"8080"}', 'invalid build: port: expected integer'],
      ['port out of range', '{"port":70000}', 'invalid build: port: expected integer to be less or equal to 65535'],
      ['a fractional count', '{"maxReplicaCount":1.5}', 'invalid build: maxReplicaCount: expected integer'],
      ['a negative count', '{"gpuCount":-1}', 'invalid build: gpuCount: expected integer to be greater or equal to 0'],
      ['null for an optional field', '{"initError":null}', 'invalid build: initError: expected string'],
      ['a boolean as a string', '{"useUv":"true"}', 'invalid build: useUv: expected boolean'],
      ['runtime not cortex or custom', '{"runtime":"python"}', 'invalid build: runtime: expected one of cortex, custom'],
      ['computeTier unknown', '{"computeTier":"spot"}', 'invalid build: computeTier: expected one of interruptible, protected'],
      ['entrypoint a string', '{"entrypoint":"python main.py"}', 'invalid build: entrypoint: expected array'],
      ['entrypoint with a number', '{"entrypoint":["python",1]}', 'invalid build: entrypoint.1: expected string'],
      ['finalState an array', '{"finalState":[1]}', 'invalid build: finalState: expected object'],
      ['id not matching the path', '{"id":"other"}', 'invalid build: id "other" does not match the path ("b")'],
      ['projectId not matching the path', '{"projectId":"other"}', `invalid build: projectId "other" does not match the path ("${p}")`],
      ['modelId not matching the path', '{"modelId":"other"}', 'invalid build: modelId "other" does not match the path ("app")'],
      ['id a number', '{"id":7}', 'invalid build: id: expected string']
    ]
    for (const [name, body, message] of cases) {
      const r = await main.request(path, { method: 'PUT', headers: ADMIN, body })
      t.equal(r.status, 400, name)
      t.equal(r.headers['content-type'], JSON_TYPE, name)
      const answer = r.json() as { message: string }
      t.same(Object.keys(answer), ['message'], name)
      if (message.endsWith(': ')) t.ok(answer.message.startsWith(message) && answer.message.length > message.length, `${name}: ${answer.message}`)
      else t.equal(answer.message, message, name)
    }
    t.equal((await main.request(path, { headers: ADMIN })).status, 404, 'nothing written')
    t.equal(main.logs.filter(line => line.msg === 'build stored' && line.projectId === p).length, 0)
  })

  t.test('a 10 MB build body is 413, announced or chunked, and nothing is written', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/huge`
    const huge = Buffer.from(JSON.stringify({ status: 'x'.repeat(TEN_MB) }))
    const announced = await main.request(path, { method: 'PUT', headers: { ...ADMIN, 'content-length': String(huge.length) }, body: huge })
    t.equal(announced.status, 413)
    t.equal(announced.headers['content-type'], JSON_TYPE)
    t.equal(announced.headers.connection, 'close')
    t.same(announced.json(), messageBody('request body exceeds 1048576 bytes'))
    const chunks = Array.from({ length: 10 }, (_, i) => huge.subarray(i * (huge.length / 10), (i + 1) * (huge.length / 10)))
    const chunked = await main.request(path, { method: 'PUT', headers: ADMIN, body: chunks })
    t.equal(chunked.status, 413)
    t.same(chunked.json(), messageBody('request body exceeds 1048576 bytes'))
    const account = await main.request(`/v2/projects/${p}/service-accounts`, { method: 'POST', headers: ADMIN, body: huge })
    t.equal(account.status, 413, 'the same limit on service-account bodies')
    t.equal((await main.request(path, { headers: ADMIN })).status, 404, 'nothing written')
    const justUnder = JSON.stringify({ status: 'x'.repeat(1024 * 1024 - 20) })
    t.equal((await main.request(path, { method: 'PUT', headers: ADMIN, body: justUnder })).status, 201, 'a body within the limit passes')
  })

  t.test('a body nested past 64 levels is 400 (not a 500 from a stack overflow), nothing written', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/deep`
    const nested = (levels: number): string => '{"a":'.repeat(levels) + '1' + '}'.repeat(levels)
    const tooDeep = messageBody('request body nests too deeply (limit 64 levels)')
    for (const levels of [10_000, 64]) {
      const r = await main.request(path, { method: 'PUT', headers: ADMIN, body: `{"status":"ok","originalState":${nested(levels)}}` })
      t.equal(r.status, 400, `originalState ${levels} levels deep`)
      t.equal(r.headers['content-type'], JSON_TYPE)
      t.same(r.json(), tooDeep, `originalState ${levels} levels deep`)
    }
    const arrays = await main.request(path, { method: 'PUT', headers: ADMIN, body: `{"updateInput":{"a":${'['.repeat(10_000)}${']'.repeat(10_000)}}}` })
    t.equal(arrays.status, 400, 'arrays count as levels too')
    t.same(arrays.json(), tooDeep)
    const account = await main.request(`/v2/projects/${p}/service-accounts`, { method: 'POST', headers: ADMIN, body: `{"name":${nested(10_000)}}` })
    t.equal(account.status, 400, 'the same limit on service-account bodies')
    t.same(account.json(), tooDeep)
    t.equal((await main.request(path, { headers: ADMIN })).status, 404, 'nothing written')
    t.equal(main.logs.filter(line => line.msg === 'build stored' && line.projectId === p).length, 0)
    const brackets = { note: '"\\' + '[{'.repeat(100) }
    const deepest = await main.request(path, { method: 'PUT', headers: ADMIN, body: `{"status":"ok","originalState":${nested(63)},"finalState":${JSON.stringify(brackets)}}` })
    t.equal(deepest.status, 201, '64 levels in all (the body, then originalState\'s 63) are stored; brackets inside strings do not count')
    const stored = await main.request(path, { headers: ADMIN })
    t.equal(stored.status, 200)
    const { originalState, finalState } = stored.json() as { originalState: unknown, finalState: unknown }
    t.same(originalState, JSON.parse(nested(63)), 'read back as sent')
    t.same(finalState, brackets)
  })

  t.test('unknown routes are 404 and wrong methods 405 with Allow, as JSON', async t => {
    const p = ctx.project()
    const notFound = ['/', '/v2', '/v2/', '/v2/projects', `/v2/projects/${p}`, `/v2/projects/${p}/apps/app`, `/v2/projects/${p}/apps/app/builds`,
      `/v2/projects/${p}/apps/app/builds/b/logs`, `/v2/projects/${p}/service-accounts/x/y`, `/v2/things/${p}/apps/a/builds/b`, '/v4/p/a/run', '/healthz/x']
    for (const path of notFound) {
      const r = await main.request(path, { headers: ADMIN })
      t.equal(r.status, path === '/v2/' ? 400 : 404, path)
      t.equal(r.headers['content-type'], JSON_TYPE, path)
      t.same(r.json(), path === '/v2/' ? messageBody(MALFORMED('')) : messageBody('no such route'), path)
    }
    const methods: Array<[string, string, string]> = [
      ['POST', `/v2/projects/${p}/apps/app/builds/b`, 'GET, HEAD, PUT'],
      ['DELETE', `/v2/projects/${p}/apps/app/builds/b`, 'GET, HEAD, PUT'],
      ['PUT', `/v2/projects/${p}/service-accounts`, 'GET, HEAD, POST'],
      ['GET', `/v2/projects/${p}/service-accounts/x`, 'DELETE'],
      ['POST', '/healthz', 'GET, HEAD'],
      ['DELETE', '/.well-known/revoked-tokens', 'GET, HEAD'],
      ['PUT', '/openapi.json', 'GET, HEAD']
    ]
    for (const [method, path, allow] of methods) {
      const r = await main.request(path, { method, headers: ADMIN })
      t.equal(r.status, 405, `${method} ${path}`)
      t.equal(r.headers.allow, allow)
      t.same(r.json(), messageBody('method not allowed'))
    }
    const query = await main.request('/healthz?verbose=1')
    t.equal(query.status, 200, 'a query string does not change the route')
  })

  t.test('GET /healthz: 200 {"status":"ok"}', async t => {
    const r = await main.request('/healthz')
    t.equal(r.status, 200)
    t.equal(r.headers['content-type'], JSON_TYPE)
    t.equal(r.text, '{"status":"ok"}')
  })

  t.test('a request that is not HTTP gets a JSON 400 and the connection closes', async t => {
    const raw = await sendRaw(main.store.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n')
    t.match(raw, /^HTTP\/1\.1 400 Bad Request\r\n/)
    t.match(raw, /\r\n\r\n\{"message":"malformed request"\}$/)
  })
}
