import type { Test } from 'tap'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { privateRunStore, type PrivateRunStore } from '../../helpers/redis-server.ts'
import { runsAppFor, runsClient, runsSidecarFor, type RunsApp, type RunsClient } from '../../helpers/runs-client.ts'
import { eventually, type Harness } from '../../helpers/sidecar-harness.ts'
import { openStream } from '../../stream/sse-test-kit.ts'

// What the RUN_ACCESS tests share: one app's sidecars with auth on (one in memory, two sharing a
// private Redis and one JWKS), two callers of project p (tokens with the subs alice and bob),
// and the one answer a run another caller submitted may get: the 404 of a run never recorded.

export type Backend = 'memory' | 'redis'
export const BACKENDS: readonly Backend[] = ['memory', 'redis']
export type Who = 'alice' | 'bob'

export const NO_SUCH_RUN = '{"message":"no such run"}'

export interface AccessFleet {
  readonly app: RunsApp
  /** One sidecar in memory; two sharing a private Redis. */
  readonly sidecars: readonly Harness[]
  readonly redis: PrivateRunStore | undefined
  /** A client of app p/a for `who` (its token's sub), through sidecar `i` (wrapping round: in memory always the one). */
  readonly as: (who: Who, i?: number) => RunsClient
}

/** The fleet, with `env` on every sidecar (RUN_ACCESS among them); REPLICA_CONCURRENCY 2 in memory, 1 on each of the two replicas. */
export async function accessFleet (t: Test, backend: Backend, env: Record<string, string> = {}): Promise<AccessFleet> {
  const app = await runsAppFor(t)
  const redis = backend === 'redis' ? await privateRunStore(t) : undefined
  const common = { PROJECT_ID: 'p', APP_NAME: 'a', ...redis?.env, ...env }
  const first = await runsSidecarFor(t, app.url, { REPLICA_CONCURRENCY: redis === undefined ? '2' : '1', HOSTNAME: 'first', ...common })
  const sidecars = [first]
  if (redis !== undefined) {
    // the tokens of the first's issuer are good on both
    sidecars.push(await runsSidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1', HOSTNAME: 'second', AUTH_JWKS_URL: first.jwks.url.href, ...common }))
    // both hear the app's cancel channel: an ask for a call is answered by both
    await eventually(async () => await redis.probe.call('PUBSUB', 'NUMSUB', 'as:{p/a}:cancel').then(r => (r as [string, number])[1] === 2))
  }
  const tokens = { alice: await first.issuer.sign('p', { claims: { sub: 'alice' } }), bob: await first.issuer.sign('p', { claims: { sub: 'bob' } }) }
  const as = (who: Who, i = 0): RunsClient => runsClient({ base: (sidecars[i % sidecars.length] as Harness).base, project: 'p', app: 'a', token: tokens[who] })
  return { app, sidecars, redis, as }
}

/** `GET …/_runs` + `query` as `client`'s caller. */
export async function listOf (client: RunsClient, query = '', method = 'GET'): Promise<SentResponse> {
  return await send(`${client.runUrl('').slice(0, -1)}${query}`, { method, headers: client.headers() })
}

/** The run ids of a `GET …/_runs` page, and its next cursor. */
export function pageOf (r: SentResponse): { ids: string[], next: string | null } {
  const page = r.json() as { runs: Array<{ run_id: string }>, next_cursor: string | null }
  return { ids: page.runs.map(run => run.run_id), next: page.next_cursor }
}

/** Every page of `client`'s list from the first, `limit` a page, following next_cursor until it is null. */
export async function allPages (t: Test, client: RunsClient, limit: number, status = ''): Promise<string[][]> {
  const pages: string[][] = []
  let r = await listOf(client, `?limit=${limit}${status === '' ? '' : `&status=${status}`}`)
  for (;;) {
    t.equal(r.status, 200, r.text)
    const { ids, next } = pageOf(r)
    pages.push(ids)
    if (next === null) return pages
    r = await listOf(client, `?cursor=${next}&limit=${limit}`)
  }
}

/** `GET …/_runs/{id}/events` as `client`'s caller: the answer as read within `ms` (a stream of a run that goes on is cut then). */
export async function eventsOf (client: RunsClient, runId: string, ms = 2000): Promise<SentResponse> {
  const stream = await openStream(client.runUrl(runId, '/events'), client.headers() as Record<string, string>)
  await Promise.race([stream.done, new Promise(resolve => setTimeout(resolve, ms))])
  stream.req.destroy()
  const text = stream.raw()
  return { status: stream.status, headers: stream.headers, body: Buffer.from(text), text, json: () => JSON.parse(text) }
}

/** The `_runs` routes of one run, as `client`'s caller asks them: its record, its events, its cancel. */
export async function askAll (client: RunsClient, runId: string): Promise<{ record: SentResponse, events: SentResponse, cancel: SentResponse }> {
  return {
    record: await send(client.runUrl(runId), { headers: client.headers() }),
    events: await eventsOf(client, runId),
    cancel: await client.cancel(runId)
  }
}

/** Header names of an answer, but those whose values differ between any two answers (the date). */
const headerNames = (r: SentResponse): string[] => Object.keys(r.headers).filter(name => name !== 'date').sort()

/**
 * `r` is exactly what a run never recorded gets (asked the same way by the same caller): 404,
 * `{"message":"no such run"}`, the same headers (its own X-Request-Id), nothing that tells the run exists.
 */
export function assertNoSuchRun (t: Test, r: SentResponse, unknown: SentResponse, what: string): void {
  t.equal(r.status, 404, `${what}: 404`)
  t.equal(r.text, NO_SUCH_RUN, `${what}: the body of a run never recorded`)
  t.same(headerNames(r), headerNames(unknown), `${what}: the headers of a run never recorded`)
  t.equal(r.headers['content-type'], unknown.headers['content-type'])
  t.equal(r.headers['content-length'], unknown.headers['content-length'])
}

/**
 * Every `_runs` route of `runId` answers `client`'s caller as for an id never recorded (each
 * compared with the same route's answer for `never-recorded`).
 */
export async function assertHidden (t: Test, client: RunsClient, runId: string): Promise<void> {
  const got = await askAll(client, runId)
  const unknown = await askAll(client, 'never-recorded')
  assertNoSuchRun(t, got.record, unknown.record, `GET ${runId}`)
  assertNoSuchRun(t, got.events, unknown.events, `GET ${runId}/events`)
  assertNoSuchRun(t, got.cancel, unknown.cancel, `POST ${runId}/cancel`)
}
