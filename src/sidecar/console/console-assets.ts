import { readFileSync } from 'node:fs'
import type { ServerResponse } from 'node:http'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'

/**
 * Every console answer's headers: the page may run only its own script and styles and talk only
 * to the sidecar (no inline script, no other origin), is never framed, cached or sent a referrer.
 */
export const CONSOLE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store'
}

/** One file the page loads, held in memory from the console's start. */
interface Asset {
  readonly type: string
  readonly bytes: Buffer
}

const ASSETS = new URL('./assets/', import.meta.url)
const require = createRequire(import.meta.url)
// uPlot (MIT), a dependency of the package: the one file of its build a browser loads, and its styles
const UPLOT_DIST = dirname(require.resolve('uplot/dist/uPlot.iife.min.js'))

const JS = 'text/javascript; charset=utf-8'
const CSS = 'text/css; charset=utf-8'

/** The page and the files it loads, by the path under /console they are served at ('' the page). */
export function loadConsoleAssets (): ReadonlyMap<string, Asset> {
  const own = (name: string): Buffer => readFileSync(new URL(name, ASSETS))
  return new Map<string, Asset>([
    ['', { type: 'text/html; charset=utf-8', bytes: own('console.html') }],
    ['/static/console.js', { type: JS, bytes: own('console.js') }],
    ['/static/console.css', { type: CSS, bytes: own('console.css') }],
    ['/static/uplot.js', { type: JS, bytes: readFileSync(join(UPLOT_DIST, 'uPlot.iife.min.js')) }],
    ['/static/uplot.css', { type: CSS, bytes: readFileSync(join(UPLOT_DIST, 'uPlot.min.css')) }]
  ])
}

/** Answers a GET or HEAD of an asset. */
export function sendAsset (res: ServerResponse, asset: Asset, head: boolean): void {
  res.writeHead(200, { 'content-type': asset.type, 'content-length': asset.bytes.length })
  res.end(head ? undefined : asset.bytes)
}
