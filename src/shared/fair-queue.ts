import Denque from 'denque'

/** RFC 9218 urgencies: 0 (most urgent) to 7. */
export const URGENCY_LEVELS = 8
/** RFC 9218's default urgency (no `Priority`, or a malformed one). */
export const DEFAULT_URGENCY = 3

/** One key's items at one urgency, in order. */
interface Line<T> {
  readonly key: string
  readonly items: Denque<T>
  /** Its entries in its level's ring: 0 parked (empty, or its key capped); 2 when put first while in the round (the later entry is then dropped). */
  turns: number
  /** Items told dead (forget) and not dropped yet. */
  dead: number
}

interface Level<T> {
  readonly lines: Map<string, Line<T>>
  /** Lines with items, served round robin: the head gives one item and goes to the tail. */
  ring: Denque<Line<T>>
  /** Lines left empty in the ring by forget() since it was last swept (some may have items again). */
  emptied: number
}

/**
 * Items served by urgency (0 first), then round robin across keys (callers), each key's own in
 * order; every operation O(1) amortised. Items no longer `live` are dropped when met (lazy
 * deletion); a key `capped` at that moment is passed over until `unpark(key)`.
 */
export class FairQueue<T> {
  readonly #levels: Array<Level<T>> = []
  readonly #live: (item: T) => boolean
  readonly #capped: ((key: string) => boolean) | undefined

  constructor (live: (item: T) => boolean, capped?: (key: string) => boolean) {
    this.#live = live
    this.#capped = capped
    for (let u = 0; u < URGENCY_LEVELS; u++) this.#levels.push({ lines: new Map(), ring: new Denque(), emptied: 0 })
  }

  /** Queues `item` last among `key`'s at `urgency`. */
  push (urgency: number, key: string, item: T): void {
    const line = this.#lineOf(urgency, key)
    line.items.push(item)
    this.#enter(urgency, line, false)
  }

  /** Puts `item` back first among `key`'s at `urgency`, its key first in the round: where it was before shift() took it. */
  putFirst (urgency: number, key: string, item: T): void {
    const line = this.#lineOf(urgency, key)
    line.items.unshift(item)
    this.#enter(urgency, line, true)
  }

  /** The urgency of the next item, or URGENCY_LEVELS when none is ready. */
  nextUrgency (): number {
    return this.#front()
  }

  /** The next item, left in the queue. */
  peek (): T | undefined {
    const urgency = this.#front()
    return urgency === URGENCY_LEVELS ? undefined : (this.#levels[urgency] as Level<T>).ring.peekFront()?.items.peekFront()
  }

  /** The next item, taken off the queue; its key goes last in its urgency's round. */
  shift (): T | undefined {
    const urgency = this.#front()
    if (urgency === URGENCY_LEVELS) return undefined
    const level = this.#levels[urgency] as Level<T>
    const line = level.ring.shift() as Line<T>
    line.turns--
    const item = line.items.shift()
    if (line.turns > 0) return item // put first while in the round: its later entry is its next turn
    if (line.items.length > 0) this.#enter(urgency, line, false)
    else this.#drop(level, line)
    return item
  }

  /**
   * An item of `key` at `urgency` is no longer live (a wait abandoned). Dead items are dropped when
   * met at a line's head; a line met seldom (its key capped, or no slot freeing for a long time)
   * would keep them all, so once they are half of it the line keeps only its live ones: O(1)
   * amortised, and never more than twice the live items held.
   */
  forget (urgency: number, key: string): void {
    const level = this.#levels[urgency] as Level<T>
    const line = level.lines.get(key)
    if (line === undefined || ++line.dead * 2 < line.items.length) return
    const live = line.items.toArray().filter(this.#live)
    line.items.clear()
    for (const item of live) line.items.push(item)
    line.dead = 0
    this.#drop(level, line)
    // a line emptied while in the round would stay there until a slot frees and the round meets it:
    // each caller that waited and left would keep ~150 B that long; swept once they are half the round
    if (line.items.length === 0 && line.turns > 0 && ++level.emptied * 2 > level.ring.length) this.#sweep(level)
  }

  /** Keys with a line at any urgency (items, or an empty line still in its round); O(levels). */
  lineCount (): number {
    let count = 0
    for (const level of this.#levels) count += level.lines.size
    return count
  }

  /** Items held, dead ones not dropped yet included; O(keys). */
  stored (): number {
    let count = 0
    for (const level of this.#levels) for (const line of level.lines.values()) count += line.items.length
    return count
  }

  /** `key` is no longer capped: its parked lines are served again. */
  unpark (key: string): void {
    for (let u = 0; u < URGENCY_LEVELS; u++) {
      const line = (this.#levels[u] as Level<T>).lines.get(key)
      if (line !== undefined) this.#enter(u, line, false)
    }
  }

  #lineOf (urgency: number, key: string): Line<T> {
    const level = this.#levels[urgency] as Level<T>
    let line = level.lines.get(key)
    if (line === undefined) {
      line = { key, items: new Denque(), turns: 0, dead: 0 }
      level.lines.set(key, line)
    }
    return line
  }

  #enter (urgency: number, line: Line<T>, first: boolean): void {
    if (line.items.length === 0) return
    const ring = (this.#levels[urgency] as Level<T>).ring
    if (first) {
      // at the head of the round even when its key is in it further on: shift() gave it that turn
      line.turns++
      ring.unshift(line)
    } else if (line.turns === 0) {
      line.turns++
      ring.push(line)
    }
  }

  /** An empty line out of the round is forgotten (a later item makes a new one). */
  #drop (level: Level<T>, line: Line<T>): void {
    if (line.turns === 0 && line.items.length === 0) level.lines.delete(line.key)
  }

  /** The level's round without its empty lines, which are forgotten: O(round), run once per half a round of lines emptied. */
  #sweep (level: Level<T>): void {
    const kept = new Denque<Line<T>>()
    for (const line of level.ring.toArray()) {
      if (line.items.length > 0) {
        kept.push(line)
      } else {
        line.turns--
        this.#drop(level, line)
      }
    }
    level.ring = kept
    level.emptied = 0
  }

  /** The most urgent level whose ring's head line has a live item of an uncapped key (dead items and capped lines leave on the way). */
  #front (): number {
    for (let u = 0; u < URGENCY_LEVELS; u++) {
      const level = this.#levels[u] as Level<T>
      for (let line = level.ring.peekFront(); line !== undefined; line = level.ring.peekFront()) {
        while (line.items.length > 0 && !this.#live(line.items.peekFront() as T)) {
          line.items.shift()
          if (line.dead > 0) line.dead--
        }
        if (line.items.length === 0) {
          level.ring.shift()
          line.turns--
          this.#drop(level, line)
        } else if (this.#capped?.(line.key) === true) {
          level.ring.shift()
          line.turns-- // at 0, parked (items kept) until unpark(key)
        } else {
          return u
        }
      }
    }
    return URGENCY_LEVELS
  }
}
