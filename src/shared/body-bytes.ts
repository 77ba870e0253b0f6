import { isUtf8 } from 'node:buffer'

// A response body as the chunks it arrived in, handled without joining it into one copy.

/** Bytes of the UTF-8 character a lead byte starts; 0 for a byte no character starts with. */
function sequenceLength (lead: number): number {
  if (lead < 0x80) return 1
  if (lead >= 0xc2 && lead < 0xe0) return 2
  if (lead >= 0xe0 && lead < 0xf0) return 3
  if (lead >= 0xf0 && lead < 0xf5) return 4
  return 0
}

/** True when the chunks, joined, are valid UTF-8 (a character may be split across chunks). */
export function isUtf8Chunks (chunks: readonly Buffer[]): boolean {
  let carry: Buffer | undefined // the start of a character cut by the previous chunk's end
  for (const chunk of chunks) {
    let start = 0
    if (carry !== undefined) {
      start = sequenceLength(carry[0] as number) - carry.length
      if (start > chunk.length) {
        carry = Buffer.concat([carry, chunk])
        continue
      }
      if (!isUtf8(Buffer.concat([carry, chunk.subarray(0, start)]))) return false
      carry = undefined
    }
    let cut = chunk.length
    for (let i = chunk.length - 1; i >= Math.max(start, chunk.length - 4); i--) {
      const byte = chunk[i] as number
      if ((byte & 0xc0) === 0x80) continue
      if (i + sequenceLength(byte) > chunk.length) cut = i
      break
    }
    if (!isUtf8(chunk.subarray(start, cut))) return false
    if (cut < chunk.length) carry = chunk.subarray(cut)
  }
  return carry === undefined
}

const isJsonSpace = (b: number): boolean => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09

/** The chunks without the JSON whitespace (space, tab, CR, LF) before the first and after the last other byte. */
export function trimJsonSpace (chunks: readonly Buffer[]): Buffer[] {
  const out = chunks.filter(chunk => chunk.length > 0)
  while (out.length > 0) {
    const first = out[0] as Buffer
    let i = 0
    while (i < first.length && isJsonSpace(first[i] as number)) i++
    if (i < first.length) { out[0] = first.subarray(i); break }
    out.shift()
  }
  while (out.length > 0) {
    const last = out[out.length - 1] as Buffer
    let i = last.length
    while (i > 0 && isJsonSpace(last[i - 1] as number)) i--
    if (i > 0) { out[out.length - 1] = last.subarray(0, i); break }
    out.pop()
  }
  return out
}

const HEX = '0123456789abcdef'
const SHORT_ESCAPES: Readonly<Record<number, string>> = { 0x08: '\\b', 0x09: '\\t', 0x0a: '\\n', 0x0c: '\\f', 0x0d: '\\r', 0x22: '\\"', 0x5c: '\\\\' }

/** The escape JSON.stringify writes for a byte, or undefined for a byte it keeps as is. */
function escapeOf (b: number): string | undefined {
  if (b >= 0x20 && b !== 0x22 && b !== 0x5c) return undefined
  return SHORT_ESCAPES[b] ?? `\\u00${HEX[b >> 4] as string}${HEX[b & 15] as string}`
}

/** Valid UTF-8 chunks as a JSON string literal, byte for byte what JSON.stringify writes for their text. */
export function jsonStringBytes (chunks: readonly Buffer[]): Buffer {
  let length = 2
  for (const chunk of chunks) {
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i] as number
      length += byte >= 0x20 && byte !== 0x22 && byte !== 0x5c ? 1 : (escapeOf(byte) as string).length
    }
  }
  const out = Buffer.allocUnsafe(length)
  out[0] = 0x22
  let at = 1
  for (const chunk of chunks) {
    let from = 0
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i] as number
      if (byte >= 0x20 && byte !== 0x22 && byte !== 0x5c) continue
      const escape = escapeOf(byte) as string
      at += chunk.copy(out, at, from, i)
      at += out.write(escape, at, 'latin1')
      from = i + 1
    }
    at += chunk.copy(out, at, from)
  }
  out[at] = 0x22
  return out
}
