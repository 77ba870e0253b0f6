/**
 * The runnable shell blocks of the Markdown docs (the convention is in docs/operations.md,
 * "Runnable examples"): a fenced `sh` or `bash` block right under a `<!-- runnable … -->`
 * comment, and the output it states, a `text` block right after it.
 */

/** What a runnable block needs before it runs, from its marker. */
export interface BlockSetup {
  /** `demo`: the demo (`npm start`) runs, with these variables (`demo NAME=value …`); undefined: no demo. */
  readonly demo?: Record<string, string>
  /** `redis`: a private redis-server stands for 127.0.0.1:6379. */
  readonly redis: boolean
}

export interface RunnableBlock {
  /** `README.md:42`: the file and the line of the opening fence. */
  readonly where: string
  readonly setup: BlockSetup
  readonly code: string
  /** The block's stated output (the `text` block after it), or undefined. */
  readonly expected?: string
}

const MARKER = /^<!--\s*runnable(?::\s*(.*?))?\s*-->$/
const FENCE = /^(`{3,})\s*([\w-]*)/

/** The setup a marker's words name: `demo [NAME=value …]`, `redis`. */
export function parseMarker (words: string, where: string): BlockSetup {
  let demo: Record<string, string> | undefined
  let redis = false
  for (const word of words.split(/\s+/).filter(w => w !== '')) {
    const assignment = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(word)
    if (word === 'demo') demo = {}
    else if (word === 'redis') redis = true
    else if (assignment !== null && demo !== undefined) demo[assignment[1] as string] = assignment[2] as string
    else throw new Error(`${where}: unknown word in the runnable marker: ${word}`)
  }
  return demo === undefined ? { redis } : { demo, redis }
}

/** Every runnable block of one Markdown text, in order; `file` names it in `where`. */
export function runnableBlocks (markdown: string, file: string): RunnableBlock[] {
  const lines = markdown.split('\n')
  const blocks: RunnableBlock[] = []
  let i = 0
  /** The fenced block opening at line `start`: its info word, its body, and the line after its closing fence. */
  const fenceAt = (start: number): { info: string, body: string, next: number } | undefined => {
    const open = FENCE.exec(lines[start] ?? '')
    if (open === null) return undefined
    const ticks = open[1] as string
    let end = start + 1
    while (end < lines.length && !(lines[end] as string).startsWith(ticks)) end++
    if (end === lines.length) throw new Error(`${file}:${start + 1}: a fenced block that never closes`)
    return { info: open[2] as string, body: lines.slice(start + 1, end).join('\n'), next: end + 1 }
  }
  while (i < lines.length) {
    const marker = MARKER.exec((lines[i] as string).trim())
    if (marker === null) {
      // a fence's body is not searched for markers
      i = FENCE.test(lines[i] as string) ? (fenceAt(i) as { next: number }).next : i + 1
      continue
    }
    const where = `${file}:${i + 2}`
    const block = fenceAt(i + 1)
    if (block === undefined || !['sh', 'bash'].includes(block.info)) throw new Error(`${where}: a runnable marker must stand right above a sh or bash block`)
    let next = block.next
    while (next < lines.length && (lines[next] as string).trim() === '') next++
    const output = FENCE.test(lines[next] ?? '') ? fenceAt(next) : undefined
    const expected = output?.info === 'text' ? output.body : undefined
    blocks.push({ where, setup: parseMarker(marker[1] ?? '', where), code: block.body, ...(expected === undefined ? {} : { expected }) })
    i = expected === undefined ? block.next : (output as { next: number }).next
  }
  return blocks
}

const ELLIPSIS = '…'
const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
const trimmedLines = (text: string): string[] => {
  const lines = text.split('\n').map(line => line.trimEnd())
  while (lines[0] === '') lines.shift()
  while (lines.at(-1) === '') lines.pop()
  return lines
}

/**
 * Whether `actual` is the output `expected` states: line by line, trailing spaces and blank lines
 * at either end aside; `…` within a line stands for any text in that line, and a line that is
 * only `…` for any number of lines (none included). Undefined when it is; else the first
 * expected line that could not be matched, for the failure message.
 */
export function outputMismatch (expected: string, actual: string): string | undefined {
  const want = trimmedLines(expected)
  const got = trimmedLines(actual)
  const patterns = want.map(line => line === ELLIPSIS ? null : new RegExp(`^${line.split(ELLIPSIS).map(escape).join('.*')}$`))
  let furthest = 0
  const memo = new Set<string>()
  const matches = (w: number, g: number): boolean => {
    furthest = Math.max(furthest, w)
    if (w === patterns.length) return g === got.length
    const key = `${w},${g}`
    if (memo.has(key)) return false
    memo.add(key)
    const pattern = patterns[w]
    if (pattern === null) {
      for (let skip = g; skip <= got.length; skip++) if (matches(w + 1, skip)) return true
      return false
    }
    return g < got.length && (pattern as RegExp).test(got[g] as string) && matches(w + 1, g + 1)
  }
  if (matches(0, 0)) return undefined
  return furthest < want.length ? `no output line matches expected line ${furthest + 1}: ${want[furthest] as string}` : 'more output than expected'
}
