import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { filesUnder } from '../helpers/source-tree.ts'

// A comment in src/ that gives its reason points to where the docs state the rule, as
// `docs/<file>.md, "<heading>"` (or the file alone): the file must exist and hold that heading,
// exactly. No comment points to a "SPEC": there is none in the repository to look in.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const SRC = join(ROOT, 'src')

/** One comment line of a source file: its 1-based line number and its text, comment marks removed. */
interface CommentLine {
  readonly line: number
  readonly text: string
}

/** A reference a comment makes: `docs/<file>.md`, and the heading it names, if any. */
interface DocReference {
  readonly where: string
  readonly file: string
  readonly heading?: string
}

// the heading may run onto the comment's next line: the lines of one comment are read joined
const REFERENCE = /docs\/([\w.-]+\.md)(?:,\s+"([^"]+)")?/g
const FENCE = /^\s*(`{3,}|~{3,})/
const HEADING = /^#{1,6}\s+(.+?)\s*$/

/**
 * The comments of a TypeScript text, each a run of consecutive comment lines: `//` lines, the
 * lines of a `/* … *\/` block, and a `//` after code (preceded by a space, so never a URL's).
 */
function commentsOf (source: string): CommentLine[][] {
  const comments: CommentLine[][] = []
  let current: CommentLine[] = []
  let inBlock = false
  const end = (): void => {
    if (current.length > 0) comments.push(current)
    current = []
  }
  source.split('\n').forEach((raw, index) => {
    const line = index + 1
    const trimmed = raw.trim()
    if (inBlock || trimmed.startsWith('/*')) {
      const body = inBlock ? trimmed : trimmed.replace(/^\/\*+/, '')
      const close = body.indexOf('*/')
      inBlock = close === -1
      current.push({ line, text: (close === -1 ? body : body.slice(0, close)).replace(/^\*+/, '').trim() })
      if (!inBlock) end()
      return
    }
    if (trimmed.startsWith('//')) {
      current.push({ line, text: trimmed.replace(/^\/\/+\s?/, '') })
      return
    }
    end()
    const trailing = raw.search(/\s\/\/\s/)
    if (trailing !== -1) comments.push([{ line, text: raw.slice(trailing).trim().replace(/^\/\/+\s?/, '') }])
  })
  end()
  return comments
}

/** The references to docs/ in some comments; `file` names the source in `where`. */
function referencesIn (comments: CommentLine[][], file: string): DocReference[] {
  return comments.flatMap(comment => {
    const text = comment.map(({ text }) => text).join(' ')
    /** The comment line that holds the character at `offset` of the joined text. */
    const lineAt = (offset: number): number => {
      let start = 0
      for (const { line, text: lineText } of comment) {
        if (offset < start + lineText.length + 1) return line
        start += lineText.length + 1
      }
      return (comment.at(-1) as CommentLine).line
    }
    return [...text.matchAll(REFERENCE)].map(match => {
      const where = `${file}:${lineAt(match.index)}`
      const heading = match[2]
      return heading === undefined ? { where, file: match[1] as string } : { where, file: match[1] as string, heading }
    })
  })
}

/** The headings of a Markdown text, as written after their `#`s; lines inside fenced blocks are not headings. */
function headingsOf (markdown: string): string[] {
  const headings: string[] = []
  let fence: string | undefined
  for (const line of markdown.split('\n')) {
    const marks = FENCE.exec(line)?.[1]
    if (fence === undefined && marks !== undefined) fence = marks
    else if (fence !== undefined && marks !== undefined && marks[0] === fence[0] && marks.length >= fence.length) fence = undefined
    else if (fence === undefined) {
      const heading = HEADING.exec(line)?.[1]
      if (heading !== undefined) headings.push(heading)
    }
  }
  return headings
}

/** What is wrong with each reference: its file missing, or no heading of its file with its text. */
function brokenReferences (references: DocReference[], docs: ReadonlyMap<string, readonly string[]>): string[] {
  return references.flatMap(({ where, file, heading }) => {
    const headings = docs.get(file)
    if (headings === undefined) return [`${where}: docs/${file} does not exist`]
    if (heading !== undefined && !headings.includes(heading)) return [`${where}: docs/${file} has no heading "${heading}"`]
    return []
  })
}

/** Where a comment cites a SPEC, a document the repository does not hold. */
function specCitations (comments: CommentLine[][], file: string): string[] {
  return comments.flat().filter(({ text }) => /\bSPEC\b/.test(text)).map(({ line, text }) => `${file}:${line}: ${text}`)
}

const docs = new Map(readdirSync(join(ROOT, 'docs'))
  .filter(name => name.endsWith('.md'))
  .map(name => [name, headingsOf(readFileSync(join(ROOT, 'docs', name), 'utf8'))] as const))
const scanned = filesUnder(SRC).map(path => {
  const file = relative(ROOT, path)
  return { file, comments: commentsOf(readFileSync(path, 'utf8')) }
})
const references = scanned.flatMap(({ file, comments }) => referencesIn(comments, file))

await t.test('the scan sees the docs and the references (it would pass vacuously otherwise)', async t => {
  t.ok(docs.size >= 10, `${docs.size} files in docs/`)
  t.ok(existsSync(join(ROOT, 'docs', 'runs.md')))
  t.ok(docs.get('runs.md')?.includes('Bounded wait'), 'a heading of docs/runs.md is read')
  t.notOk(docs.get('runs.md')?.includes('{"canceled":12}'), 'a shell comment in a fenced block is no heading')
  t.ok(scanned.length > 100, `${scanned.length} files in src/`)
  const named = references.filter(reference => reference.heading !== undefined)
  t.ok(named.length >= 15, `${named.length} references to a heading, ${references.length} in all`)
  t.ok(new Set(named.map(({ file }) => file)).size >= 4, 'to several files of docs/')
})

await t.test('every docs/ reference in a comment of src/ names a file and a heading that exist', async t => {
  t.same(brokenReferences(references, docs), [])
})

await t.test('no comment of src/ cites a SPEC', async t => {
  t.same(scanned.flatMap(({ file, comments }) => specCitations(comments, file)), [])
})

await t.test('the checks catch what they are for', async t => {
  const source = [
    'import t from \'tap\'',
    '/** Bounded (docs/runs.md, "Bounded wait"); see docs/nowhere.md. */',
    '/**',
    ' * Split over two lines: docs/runs.md,',
    ' * "Bounded waiting", a heading that is not there.',
    ' */',
    'const url = \'http://x/docs/errors.md, "Nope"\' // SPEC: Runs',
    '// docs/tracing.md, "The spans"'
  ].join('\n')
  const comments = commentsOf(source)
  const found = referencesIn(comments, 'a.ts')
  t.same(found, [
    { where: 'a.ts:2', file: 'runs.md', heading: 'Bounded wait' },
    { where: 'a.ts:2', file: 'nowhere.md' },
    { where: 'a.ts:4', file: 'runs.md', heading: 'Bounded waiting' },
    { where: 'a.ts:8', file: 'tracing.md', heading: 'The spans' }
  ], 'comments only, a heading on the next line included; a string is not a comment')
  t.same(brokenReferences(found, docs), [
    'a.ts:2: docs/nowhere.md does not exist',
    'a.ts:4: docs/runs.md has no heading "Bounded waiting"'
  ])
  t.same(specCitations(comments, 'a.ts'), ['a.ts:7: SPEC: Runs'])
  t.same(headingsOf('# A\n\n```sh\n# not one\n```\n## B `c`\n~~~\n# not either\n~~~'), ['A', 'B `c`'], 'nothing in a fenced block')
  t.same(headingsOf('# A\n````md\n```\n# inside\n```\n````\n## B'), ['A', 'B'], 'a fence closes only with marks as long as its own')
})
