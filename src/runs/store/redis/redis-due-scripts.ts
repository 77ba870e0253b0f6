import { luaSource } from './redis-lua-file.ts'
import { arrayReply, codeReply, defineScript, integerReply, textReply, textsReply } from './redis-named-script.ts'

// The scripts of the app's due set (redis-due.ts): leases, looks, left deliveries, lost claims;
// each in lua/<kebab-name>.lua, its KEYS, ARGV and replies in its header.

/** Lua, prepended to a script: `now`, Redis's clock in ms (lua/now.lua). */
export const NOW_LUA = luaSource('now.lua')

/** The app's sync runs' claims whose sidecar is lost, at most 16 (lua/lost-claims.lua). */
export const LOST_CLAIMS = defineScript({
  name: 'LOST_CLAIMS',
  keys: ['claims'],
  args: ['lostAfterMs'],
  reply: reply => {
    const flat = textsReply('LOST_CLAIMS', reply)
    const claims: Array<{ slot: string, runId: string }> = []
    for (let i = 0; i + 1 < flat.length; i += 2) claims.push({ slot: flat[i] as string, runId: flat[i + 1] as string })
    return claims
  }
})

/** A holding sidecar's lease in the app's due set, `lost after` ms ahead by Redis's clock (lua/lease-beat.lua): whether it was added. */
export const LEASE_BEAT = defineScript({
  name: 'LEASE_BEAT',
  keys: ['dueSet'],
  args: ['member', 'lostAfterMs'],
  reply: reply => codeReply('LEASE_BEAT', reply, [1, 0]) === 1
})

/** A delivery left for another sidecar: idle as a lost one's, due at once (lua/leave-delivery.lua): whether it was added. */
export const LEAVE_DELIVERY = defineScript({
  name: 'LEAVE_DELIVERY',
  keys: ['deliveriesStream', 'dueSet'],
  args: ['group', 'consumer', 'entry', 'idleMs', 'member'],
  reply: reply => codeReply('LEAVE_DELIVERY', reply, [1, 0]) === 1
})

/**
 * What LOOK_DUE sees: Redis's clock, the due set's first member not due (undefined none), when the
 * queued index's next run reaches the queue's TTL (undefined none), and what is due: the due set's
 * members, then queued runs past the TTL.
 */
export interface DueLook {
  readonly now: number
  readonly next: { readonly member: string, readonly at: number } | undefined
  readonly queuedAt: number | undefined
  readonly due: readonly string[]
}

/** What is due by Redis's clock: in the app's due set, and queued runs past the queue's TTL, at most `count` of each (lua/look-due.lua). */
export const LOOK_DUE = defineScript({
  name: 'LOOK_DUE',
  keys: ['dueSet', 'queuedIndex'],
  args: ['count', 'queueTtlMs'],
  reply: (reply): DueLook => {
    const [now, after, afterAt, queuedAt, ...due] = arrayReply('LOOK_DUE', reply)
    const next = textReply('LOOK_DUE', after)
    const queued = textReply('LOOK_DUE', queuedAt)
    return {
      now: integerReply('LOOK_DUE', now),
      next: next === '' ? undefined : { member: next, at: Number(textReply('LOOK_DUE', afterAt)) },
      queuedAt: queued === '' ? undefined : Number(queued),
      due: due.map(member => textReply('LOOK_DUE', member))
    }
  }
})
