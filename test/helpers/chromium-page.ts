import WebSocket from 'ws'
import { openInChromium } from './chromium.ts'
import { eventually } from './sidecar-harness.ts'
import { patient } from './timing.ts'

// A headless Chromium driven over its DevTools protocol (the browser's own, on a loopback port it
// picks): a test loads a page, types and presses keys as a person would, reads the page with
// expressions, sizes the window and takes screenshots. No driver package: `ws` and the protocol.

interface TestLike {
  comment: (why: string) => void
  fail: (why: string) => boolean
  teardown: (fn: () => unknown) => void
}

/** One page of a headless Chromium, under the test's control. */
export interface ChromiumPage {
  /** A DevTools command to the page. */
  send: <T = Record<string, unknown>>(method: string, params?: Record<string, unknown>) => Promise<T>
  /** The value of `expression` in the page (a promise is awaited); throws what the page threw. */
  evaluate: <T>(expression: string) => Promise<T>
  /** Waits until `expression` is truthy in the page (polled), failing after `ms` with `what`. */
  waitFor: (expression: string, what: string, ms?: number) => Promise<void>
  /** Loads `url` and waits for its load event. */
  load: (url: string) => Promise<void>
  /** The window's size in CSS pixels (a phone's 390 × 844, a laptop's 1280 × 800). */
  resize: (width: number, height: number) => Promise<void>
  /** Types `text` into the focused field. */
  type: (text: string) => Promise<void>
  /** Presses one key (`Enter`, `Tab`, `Escape`, `Space`) on what has the focus. */
  press: (key: keyof typeof KEYS, modifiers?: number) => Promise<void>
  /** A PNG of the page as shown (or of the whole page). */
  screenshot: (fullPage?: boolean) => Promise<Buffer>
  /** Uncaught exceptions and console errors of the page, as they came. */
  readonly problems: string[]
  /** The Content-Security-Policy violations the page met so far. */
  cspViolations: () => Promise<string[]>
}

const KEYS = {
  Enter: { key: 'Enter', code: 'Enter', windowsVirtualKeyCode: 13, text: '\r' },
  Tab: { key: 'Tab', code: 'Tab', windowsVirtualKeyCode: 9 },
  Escape: { key: 'Escape', code: 'Escape', windowsVirtualKeyCode: 27 },
  Space: { key: ' ', code: 'Space', windowsVirtualKeyCode: 32, text: ' ' }
} as const

/** Recorded in the page before any of its own scripts: every CSP violation it meets. */
const WATCH_CSP = `addEventListener('securitypolicyviolation', e => {
  (window.__cspViolations ??= []).push(e.violatedDirective + ' ' + e.blockedURI)
}, true)`

/** Opens a headless Chromium (closed at `t`'s teardown) and one page in it, blank. */
export async function openChromiumPage (t: TestLike, chromium: string): Promise<ChromiumPage> {
  const browser = await openInChromium(t, chromium, 'about:blank', ['--remote-debugging-port=0', '--hide-scrollbars'])
  let endpoint: string | undefined
  await eventually(() => {
    endpoint = /DevTools listening on (ws:\/\/\S+)/.exec(browser.output())?.[1]
    return endpoint !== undefined
  }, 20_000).catch(() => { throw new Error(`chromium did not open its DevTools port: ${browser.output()}`) })
  const socket = new WebSocket(endpoint as string, { perMessageDeflate: false })
  await new Promise((resolve, reject) => { socket.once('open', resolve).once('error', reject) })
  t.teardown(() => { socket.terminate() })

  let next = 0
  const waiting = new Map<number, { resolve: (value: unknown) => void, reject: (error: Error) => void }>()
  const listeners: Array<(method: string, params: Record<string, unknown>) => void> = []
  socket.on('message', (data: Buffer) => {
    const message = JSON.parse(data.toString()) as { id?: number, result?: unknown, error?: { message: string }, method?: string, params?: Record<string, unknown> }
    if (message.id !== undefined) {
      const pending = waiting.get(message.id)
      waiting.delete(message.id)
      if (message.error !== undefined) pending?.reject(new Error(message.error.message))
      else pending?.resolve(message.result)
    } else if (message.method !== undefined) {
      for (const listener of listeners) listener(message.method, message.params ?? {})
    }
  })
  const command = async <T>(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<T> => {
    const id = ++next
    const answered = new Promise<T>((resolve, reject) => { waiting.set(id, { resolve: resolve as (value: unknown) => void, reject }) })
    socket.send(JSON.stringify({ id, method, params, ...(sessionId === undefined ? {} : { sessionId }) }))
    return await answered
  }

  const { targetInfos } = await command<{ targetInfos: Array<{ targetId: string, type: string }> }>('Target.getTargets')
  const target = targetInfos.find(info => info.type === 'page')
  if (target === undefined) throw new Error('chromium shows no page')
  const { sessionId } = await command<{ sessionId: string }>('Target.attachToTarget', { targetId: target.targetId, flatten: true })
  const send = async <T>(method: string, params: Record<string, unknown> = {}): Promise<T> => await command<T>(method, params, sessionId)

  const problems: string[] = []
  let loads = 0
  listeners.push((method, params) => {
    if (method === 'Page.loadEventFired') loads++
    else if (method === 'Runtime.exceptionThrown') problems.push(`exception: ${JSON.stringify((params.exceptionDetails as { exception?: { description?: string } }).exception?.description ?? params)}`)
    else if (method === 'Log.entryAdded' || method === 'Runtime.consoleAPICalled') {
      const entry = (params.entry ?? params) as { level?: string, type?: string, text?: string, args?: Array<{ value?: unknown }> }
      if (entry.level === 'error' || entry.type === 'error') problems.push(`console: ${entry.text ?? JSON.stringify(entry.args?.map(a => a.value))}`)
    }
  })
  await Promise.all([send('Page.enable'), send('Runtime.enable'), send('Log.enable')])
  await send('Page.addScriptToEvaluateOnNewDocument', { source: WATCH_CSP })

  const evaluate = async <T>(expression: string): Promise<T> => {
    const { result, exceptionDetails } = await send<{ result: { value?: T }, exceptionDetails?: { text: string, exception?: { description?: string } } }>(
      'Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true })
    if (exceptionDetails !== undefined) throw new Error(`${exceptionDetails.text} ${exceptionDetails.exception?.description ?? ''}`)
    return result.value as T
  }
  const page: ChromiumPage = {
    send,
    evaluate,
    problems,
    cspViolations: async () => await evaluate<string[] | undefined>('window.__cspViolations') ?? [],
    async waitFor (expression, what, ms = 10_000) {
      await eventually(async () => await evaluate<unknown>(expression).then(Boolean, () => false), ms)
        .catch(async () => { throw new Error(`${what}: not seen in ${patient(ms)} ms (page problems: ${problems.join('; ') || 'none'})`) })
    },
    async load (url) {
      const before = loads
      await send('Page.navigate', { url })
      await eventually(() => loads > before, 15_000)
    },
    async resize (width, height) {
      await send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: width < 600 })
    },
    async type (text) { await send('Input.insertText', { text }) },
    async press (key, modifiers = 0) {
      const { text, ...rest } = KEYS[key] as { key: string, code: string, windowsVirtualKeyCode: number, text?: string }
      await send('Input.dispatchKeyEvent', { type: text === undefined ? 'rawKeyDown' : 'keyDown', modifiers, ...rest, ...(text === undefined ? {} : { text }) })
      await send('Input.dispatchKeyEvent', { type: 'keyUp', modifiers, ...rest })
    },
    async screenshot (fullPage = false) {
      const { data } = await send<{ data: string }>('Page.captureScreenshot', { format: 'png', captureBeyondViewport: fullPage })
      return Buffer.from(data, 'base64')
    }
  }
  return page
}
