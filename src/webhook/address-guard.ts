import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOneOptions } from 'node:dns'
import { isIP } from 'node:net'
import type ipaddr from 'ipaddr.js'
import { LRUCache } from 'lru-cache'
import type { Cidr } from '../config/env-parsers.ts'
import { requireCjs } from '../shared/require-cjs.ts'

const { isValid, parse, parseCIDR } = requireCjs('ipaddr.js') as typeof ipaddr

type Address = ipaddr.IPv4 | ipaddr.IPv6

const GLOBAL_UNICAST_V6 = parseCIDR('2000::/3')

/** A webhook destination whose address is not public (and not explicitly allowed). */
export class AddressRefusedError extends Error {
  readonly code = 'WEBHOOK_ADDRESS_REFUSED'
  /** The address refused, as the guard judged it (an IPv4-mapped one as its IPv4). */
  readonly address: string
  /** The reserved range that refused it, e.g. `127.0.0.0/8 (loopback)`. */
  readonly range: string
  /** What to set to allow it: `WEBHOOK_ALLOWED_CIDRS`, with the range. */
  readonly hint: string

  constructor (address: string) {
    super(`address refused: ${address}`)
    const refused = reservedRangeOf(address)
    this.address = refused.address
    this.range = refused.range
    const alone = refused.cidr === refused.single ? '' : ` (or ${refused.single} alone)`
    this.hint = `${refused.address} is in ${refused.range}, which webhooks may not reach; add ${refused.cidr}${alone} to WEBHOOK_ALLOWED_CIDRS to allow it`
  }
}

/** One of ipaddr.js's special ranges: an address and a prefix length. */
type SpecialRange = [Address, number]

/** Where a refused address lies: the range as the log line names it, and the CIDRs that would allow it. */
export interface ReservedRange {
  /** The address as judged (an IPv4-mapped one as its IPv4). */
  readonly address: string
  /** e.g. `127.0.0.0/8 (loopback)`. */
  readonly range: string
  /** The whole range, for WEBHOOK_ALLOWED_CIDRS. */
  readonly cidr: string
  /** The address alone (/32 or /128). */
  readonly single: string
}

/**
 * The reserved range `address` lies in, as a CIDR and ipaddr.js's name for it (`loopback`,
 * `private`, `linkLocal`…): the ranges `AddressGuard.allows` refuses by that name. IPv6 outside
 * 2000::/3 that ipaddr.js calls unicast is refused as not global unicast.
 */
export function reservedRangeOf (address: string): ReservedRange {
  if (!isValid(address)) return { address, range: 'no IP range (not an address)', cidr: address, single: address }
  let parsed: Address = parse(address)
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) parsed = (parsed as ipaddr.IPv6).toIPv4Address()
  const text = parsed.toString()
  const single = `${text}/${parsed.kind() === 'ipv6' ? 128 : 32}`
  const name = parsed.range()
  if (name === 'unicast') return { address: text, range: 'IPv6 outside 2000::/3 (not global unicast)', cidr: single, single }
  // ipaddr.js's own table of the ranges it names (on the prototype, not in its types): one [address, prefix] or a list of them
  const table = (parsed as unknown as { SpecialRanges: Record<string, SpecialRange | SpecialRange[]> }).SpecialRanges
  const entry = table[name]
  const ranges = entry === undefined ? [] : Array.isArray(entry[0]) ? entry as SpecialRange[] : [entry as SpecialRange]
  const found = ranges.find(([base, prefix]) => parsed.match(base, prefix))
  const cidr = found === undefined ? single : `${found[0].toString()}/${found[1]}`
  return { address: text, range: `${cidr} (${name})`, cidr, single }
}

/**
 * Decides which addresses a webhook may reach: public unicast only, unless inside one of the
 * operator's allowed ranges. IPv4-mapped IPv6 is judged as the IPv4 it carries; IPv6 forms that
 * embed or translate IPv4 (6to4, Teredo, NAT64) are refused, since their real target is hidden.
 */
export class AddressGuard {
  readonly #allowed: Array<[Address, number]>
  /** Verdicts on literal hosts already judged: a webhook's host is checked at each attempt, and parsing it costs more than the lookup. */
  readonly #literals = new LRUCache<string, boolean>({ max: 1024 })

  constructor (allowedCidrs: readonly Cidr[]) {
    this.#allowed = allowedCidrs.map(cidr => [parse(cidr.address), cidr.prefix])
  }

  allows (address: string): boolean {
    if (!isValid(address)) return false
    let parsed: Address = parse(address)
    if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
      parsed = (parsed as ipaddr.IPv6).toIPv4Address()
    }
    for (const [range, prefix] of this.#allowed) {
      if (range.kind() === parsed.kind() && parsed.match(range, prefix)) return true
    }
    // IPv6 outside 2000::/3 is reserved (ipaddr.js calls it unicast): e.g. IPv4-compatible ::7f00:1
    if (parsed.kind() === 'ipv6' && !parsed.match(GLOBAL_UNICAST_V6)) return false
    return parsed.range() === 'unicast'
  }

  /** Throws AddressRefusedError for a literal IP host that is not allowed; hostnames pass (checked at connect). */
  checkLiteralHost (hostname: string): void {
    const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname
    let allowed = this.#literals.get(bare)
    if (allowed === undefined) {
      allowed = isIP(bare) === 0 || this.allows(bare)
      this.#literals.set(bare, allowed)
    }
    if (!allowed) throw new AddressRefusedError(bare)
  }

  /**
   * A `lookup` for net.connect that resolves as usual and refuses the connection when any
   * resolved address is not allowed: the check happens on the connection itself, so a name
   * that resolves differently later (DNS rebinding) cannot slip past.
   */
  readonly lookup = (hostname: string, options: LookupOneOptions | LookupAllOptions,
    callback: (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void): void => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error !== null) { callback(error, []); return }
      const refused = addresses.find(entry => !this.allows(entry.address))
      if (refused !== undefined) { callback(new AddressRefusedError(refused.address), []); return }
      if (options.all === true) { callback(null, addresses); return }
      const first = addresses[0] as LookupAddress
      callback(null, first.address, first.family)
    })
  }
}
