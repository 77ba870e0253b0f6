import type { LookupAddress } from 'node:dns'
import t from 'tap'
import { AddressGuard, AddressRefusedError, reservedRangeOf } from '../../src/webhook/address-guard.ts'
import { parseCidrList } from '../../src/config/env-parsers.ts'

// Unit tests only call allows() / checkLiteralHost() / lookup('localhost'): nothing here connects anywhere.

const guard = (cidrs = ''): AddressGuard => new AddressGuard(cidrs === '' ? [] : parseCidrList('WEBHOOK_ALLOWED_CIDRS', cidrs))

const REFUSED: Array<[string, string]> = [
  ['127.0.0.1', 'loopback'],
  ['127.255.255.254', 'loopback, top of 127/8'],
  ['10.0.0.1', 'private 10/8'],
  ['172.16.0.1', 'private 172.16/12'],
  ['172.31.255.255', 'private 172.16/12, top'],
  ['192.168.1.1', 'private 192.168/16'],
  ['169.254.169.254', 'link-local (cloud metadata)'],
  ['100.64.0.1', 'carrier-grade NAT'],
  ['0.0.0.0', 'unspecified (reaches the local host)'],
  ['0.1.2.3', 'this network'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.250', 'multicast, top'],
  ['255.255.255.255', 'broadcast'],
  ['240.0.0.1', 'reserved class E'],
  ['192.0.0.1', 'IETF protocol assignments'],
  ['192.0.2.1', 'documentation'],
  ['198.18.0.1', 'benchmarking'],
  ['::1', 'IPv6 loopback'],
  ['::', 'IPv6 unspecified'],
  ['fd00::1', 'unique local'],
  ['fc00::1', 'unique local, fc'],
  ['fe80::1', 'link-local'],
  ['ff02::1', 'IPv6 multicast'],
  ['::ffff:127.0.0.1', 'IPv4-mapped loopback'],
  ['::ffff:7f00:1', 'IPv4-mapped loopback, hex form'],
  ['::ffff:10.0.0.1', 'IPv4-mapped private'],
  ['::ffff:169.254.169.254', 'IPv4-mapped link-local'],
  ['::ffff:0.0.0.0', 'IPv4-mapped unspecified'],
  ['::127.0.0.1', 'IPv4-compatible loopback, dotted'],
  ['::7f00:1', 'IPv4-compatible loopback, hex (the URL parser\'s form of [::127.0.0.1])'],
  ['64:ff9b::7f00:1', 'NAT64 of loopback'],
  ['2002:7f00:1::', '6to4 of loopback'],
  ['2001::1', 'Teredo'],
  ['2001:db8::1', 'IPv6 documentation'],
  ['100::1', 'discard-only'],
  ['fec0::1', 'deprecated site-local'],
  ['4000::1', 'outside global unicast 2000::/3']
]

const PUBLIC = ['8.8.8.8', '1.1.1.1', '93.184.216.34', '2606:4700::1111', '2001:4860:4860::8888', '::ffff:8.8.8.8']

t.test('allows(): loopback, private, link-local, multicast and reserved addresses are refused', async t => {
  const g = guard()
  for (const [address, why] of REFUSED) t.equal(g.allows(address), false, `${address}: ${why}`)
})

t.test('reservedRangeOf(): the range that refused an address, as a CIDR that WEBHOOK_ALLOWED_CIDRS takes and that then allows it', async t => {
  for (const [address, why] of REFUSED) {
    const refused = reservedRangeOf(address)
    t.equal(guard(refused.cidr).allows(address), true, `${address} (${why}): ${refused.range}, allowed by ${refused.cidr}`)
    t.equal(guard(refused.single).allows(address), true, `${address}: allowed alone by ${refused.single}`)
  }
  t.same(reservedRangeOf('127.0.0.1'), { address: '127.0.0.1', range: '127.0.0.0/8 (loopback)', cidr: '127.0.0.0/8', single: '127.0.0.1/32' })
  t.same(reservedRangeOf('172.31.255.255'), { address: '172.31.255.255', range: '172.16.0.0/12 (private)', cidr: '172.16.0.0/12', single: '172.31.255.255/32' })
  t.same(reservedRangeOf('169.254.169.254'), { address: '169.254.169.254', range: '169.254.0.0/16 (linkLocal)', cidr: '169.254.0.0/16', single: '169.254.169.254/32' })
  t.same(reservedRangeOf('::ffff:10.0.0.1'), { address: '10.0.0.1', range: '10.0.0.0/8 (private)', cidr: '10.0.0.0/8', single: '10.0.0.1/32' }, 'IPv4-mapped: as its IPv4')
  t.same(reservedRangeOf('fd00::1'), { address: 'fd00::1', range: 'fc00::/7 (uniqueLocal)', cidr: 'fc00::/7', single: 'fd00::1/128' })
  t.same(reservedRangeOf('::1'), { address: '::1', range: '::1/128 (loopback)', cidr: '::1/128', single: '::1/128' })
  t.same(reservedRangeOf('4000::1'), { address: '4000::1', range: 'IPv6 outside 2000::/3 (not global unicast)', cidr: '4000::1/128', single: '4000::1/128' })
})

t.test('AddressRefusedError: the address, the range, and a hint naming WEBHOOK_ALLOWED_CIDRS', async t => {
  const error = new AddressRefusedError('127.0.0.1')
  t.equal(error.message, 'address refused: 127.0.0.1')
  t.equal(error.range, '127.0.0.0/8 (loopback)')
  t.equal(error.hint, '127.0.0.1 is in 127.0.0.0/8 (loopback), which webhooks may not reach; add 127.0.0.0/8 (or 127.0.0.1/32 alone) to WEBHOOK_ALLOWED_CIDRS to allow it')
  t.equal(new AddressRefusedError('::1').hint, '::1 is in ::1/128 (loopback), which webhooks may not reach; add ::1/128 to WEBHOOK_ALLOWED_CIDRS to allow it', 'a one-address range: no "alone"')
})

t.test('allows(): public unicast addresses pass', async t => {
  const g = guard()
  for (const address of PUBLIC) t.equal(g.allows(address), true, address)
})

t.test('allows(): anything that is not an IP address is refused', async t => {
  const g = guard('0.0.0.0/0')
  for (const text of ['', 'localhost', 'example.com', '1.2.3.4.5', '127.0.0.1 ', ' 8.8.8.8', '[::1]', '256.1.1.1', 'fe80::1%eth0x', '::ffff:zz']) {
    t.equal(g.allows(text), false, JSON.stringify(text))
  }
})

t.test('allows(): WEBHOOK_ALLOWED_CIDRS opens exactly those ranges', async t => {
  const loop = guard('127.0.0.0/8')
  t.equal(loop.allows('127.0.0.1'), true)
  t.equal(loop.allows('127.0.0.5'), true)
  t.equal(loop.allows('127.255.255.255'), true)
  t.equal(loop.allows('::ffff:127.0.0.5'), true, 'IPv4-mapped form of an allowed IPv4 address')
  t.equal(loop.allows('::ffff:7f00:5'), true)
  t.equal(loop.allows('10.0.0.1'), false, 'other private ranges stay refused')
  t.equal(loop.allows('::1'), false, 'an IPv4 range does not open IPv6 loopback')
  t.equal(loop.allows('169.254.169.254'), false)
  t.equal(loop.allows('8.8.8.8'), true, 'public addresses still pass')

  const narrow = guard('10.1.2.0/24, 192.168.0.0/16')
  t.equal(narrow.allows('10.1.2.200'), true)
  t.equal(narrow.allows('10.1.3.1'), false)
  t.equal(narrow.allows('192.168.77.1'), true)
  t.equal(narrow.allows('172.16.0.1'), false)

  const v6 = guard('fd00::/8,::1/128')
  t.equal(v6.allows('fd12:3456::1'), true)
  t.equal(v6.allows('::1'), true)
  t.equal(v6.allows('fe80::1'), false)
  t.equal(v6.allows('127.0.0.1'), false, 'an IPv6 range does not open IPv4')

  const host = guard('127.0.0.5/32')
  t.equal(host.allows('127.0.0.5'), true)
  t.equal(host.allows('127.0.0.6'), false)
})

t.test('checkLiteralHost(): IP-literal hosts are judged now, names are left to the connection', async t => {
  const g = guard()
  for (const host of ['127.0.0.1', '[::1]', '[::ffff:7f00:1]', '0.0.0.0', '10.0.0.1', '[fd00::1]', '[::7f00:1]']) {
    let thrown: unknown
    try { g.checkLiteralHost(host) } catch (e) { thrown = e }
    t.ok(thrown instanceof AddressRefusedError, host)
  }
  let error: unknown
  try { g.checkLiteralHost('[fe80::1]') } catch (e) { error = e }
  t.equal((error as AddressRefusedError).code, 'WEBHOOK_ADDRESS_REFUSED')
  t.equal((error as Error).message, 'address refused: fe80::1')
  for (const host of ['8.8.8.8', '[2606:4700::1111]', 'example.com', 'localhost', 'hooks.internal']) {
    t.doesNotThrow(() => { g.checkLiteralHost(host) }, host)
  }
  t.doesNotThrow(() => { guard('127.0.0.0/8').checkLiteralHost('127.0.0.1') }, 'allowed by CIDR')
})

type LookupResult = { error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family: number | undefined }
const lookup = (g: AddressGuard, hostname: string, options: { all?: boolean, family?: number }): Promise<LookupResult> =>
  new Promise(resolve => {
    g.lookup(hostname, options, (error, address, family) => { resolve({ error, address, family }) })
  })

t.test('lookup(): a name resolving to a refused address fails the connection with AddressRefusedError', async t => {
  const refused = await lookup(guard(), 'localhost', {})
  t.ok(refused.error instanceof AddressRefusedError, 'localhost is loopback')
  t.match(refused.error?.message, /^address refused: /)
  const all = await lookup(guard(), 'localhost', { all: true })
  t.ok(all.error instanceof AddressRefusedError, 'with all: true as well')
  const onlyV4 = await lookup(guard(), 'localhost', { family: 4 })
  t.ok(onlyV4.error instanceof AddressRefusedError, 'with family: 4')
})

t.test('lookup(): an allowed name resolves as dns.lookup would, one address or all', async t => {
  const g = guard('127.0.0.0/8,::1/128')
  const one = await lookup(g, 'localhost', { family: 4 })
  t.equal(one.error, null)
  t.equal(one.address, '127.0.0.1')
  t.equal(one.family, 4)
  const all = await lookup(g, 'localhost', { all: true, family: 4 })
  t.equal(all.error, null)
  t.same(all.address, [{ address: '127.0.0.1', family: 4 }])
})
