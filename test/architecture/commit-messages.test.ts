import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'

// History that explains itself (docs/operations.md, "Commits"): from the layered tree on, every
// commit's subject is at most 72 characters and its body says why. Older commits are left as they are.

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
/** The last commit before the rule. */
const SINCE = '97ee760'
const MAX_SUBJECT = 72

const git = (...args: string[]): { ok: boolean, out: string } => {
  const run = spawnSync('git', args, { cwd: ROOT, encoding: 'utf8' })
  return { ok: run.status === 0, out: run.stdout }
}

/** Each commit since SINCE, merges aside: its hash, subject and body. */
function commits (): Array<{ hash: string, subject: string, body: string }> {
  const log = git('log', '--no-merges', '--format=%h%x1f%s%x1f%b%x1e', `${SINCE}..HEAD`).out
  return log.split('\x1e').map(entry => entry.trim()).filter(entry => entry !== '').map(entry => {
    const [hash = '', subject = '', body = ''] = entry.split('\x1f')
    return { hash, subject, body: body.trim() }
  })
}

t.test('every commit since the rule has a subject of at most 72 characters and a body', async t => {
  if (!git('cat-file', '-e', `${SINCE}^{commit}`).ok) {
    // a copy without the history (an archive, a shallow clone) has nothing to check
    t.comment(`no git history back to ${SINCE}: nothing to check`)
    return
  }
  const all = commits()
  t.ok(all.length > 0, `${all.length} commits read`)
  t.same(all.filter(c => c.subject.length > MAX_SUBJECT).map(c => `${c.hash} (${c.subject.length}): ${c.subject}`), [], 'subjects over 72 characters')
  t.same(all.filter(c => c.body === '').map(c => `${c.hash}: ${c.subject}`), [], 'commits without a body')
})
