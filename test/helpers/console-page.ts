import { type ChromiumPage, openChromiumPage } from './chromium-page.ts'
import { findChromium } from './chromium.ts'
import { type RunsApp, runsAppFor, runsClient, type RunsClient } from './runs-client.ts'
import { type Harness, sidecarFor } from './sidecar-harness.ts'

// The operator console in a real browser: a runs app, a sidecar before it with CONSOLE_TOKEN (one
// slot, so runs queue), and a headless Chromium showing /console on its admin port, signed in by
// keyboard as a person would.

export const CONSOLE_TOKEN = 'console-browser-token-42'

export interface ConsoleScene {
  readonly app: RunsApp
  readonly h: Harness
  readonly client: RunsClient
  readonly page: ChromiumPage
  /** The row of run `runId` shows `status` in the runs list. */
  rowShows: (runId: string, status: string) => Promise<void>
}

interface TestLike {
  comment: (why: string) => void
  fail: (why: string) => boolean
  teardown: (fn: () => unknown) => void
}

/** The text of the row's cell `label` (its column: Status, Caller, Urgency, …), as the page shows it. */
export const rowCell = (runId: string, label: string): string =>
  `document.querySelector('#runs tr[data-run-id="${runId}"] td[data-label="${label}"]')?.textContent`

/** The row's status cell, as the page shows it. */
export const rowStatus = (runId: string): string => rowCell(runId, 'Status')

/** The scene, signed in, at `width` × `height`; undefined when there is no Chromium (see findChromium). */
export async function consoleScene (t: TestLike, width = 1280, height = 800, env: Record<string, string> = {}): Promise<ConsoleScene | undefined> {
  const chromium = findChromium(t)
  if (chromium === undefined) return undefined
  const app = await runsAppFor(t)
  const h = await sidecarFor(t, app.url, {
    PROJECT_ID: 'proj', APP_NAME: 'app', DISABLE_AUTH: 'true', CONSOLE_TOKEN, REPLICA_CONCURRENCY: '1', ...env
  })
  const client = runsClient({ base: h.base, project: 'proj', app: 'app' })
  const page = await openChromiumPage(t, chromium)
  await page.resize(width, height)
  await page.load(`${h.admin}/console`)
  await page.waitFor("!document.getElementById('login').hidden && document.activeElement?.id === 'token'", 'the sign-in form, its field focused')
  await page.type(CONSOLE_TOKEN)
  await page.press('Enter')
  await page.waitFor("!document.getElementById('console').hidden && document.getElementById('t-store').textContent === 'memory up'", 'the console, signed in')
  // the page's first read, before the sign-in, was answered 401 by design (Chromium logs it as an error)
  page.problems.length = 0
  return {
    app,
    h,
    client,
    page,
    rowShows: async (runId, status) => { await page.waitFor(`${rowStatus(runId)} === ${JSON.stringify(status)}`, `run ${runId} shown ${status}`) }
  }
}
