/**
 * A minimal decoder of OTLP's ExportTraceServiceRequest in protobuf (opentelemetry-proto
 * trace/v1), independent of the exporter under test: the fields a collector reads, as the same
 * plain shape the OTLP/JSON encoding has (ids in hex, times as decimal strings).
 */

interface Field { readonly number: number, readonly wire: number, readonly value: bigint | Uint8Array }

/** The fields of one message, in order (varints as numbers up to 2^53, then BigInt; fixed64 as BigInt). */
function fields (bytes: Uint8Array): Field[] {
  const out: Field[] = []
  let at = 0
  const varint = (): bigint => {
    let result = 0
    let scale = 1
    for (;;) {
      const byte = bytes[at++]
      if (byte === undefined) throw new Error('truncated varint')
      result += (byte & 0x7f) * scale
      if ((byte & 0x80) === 0) return BigInt(result)
      scale *= 128
    }
  }
  while (at < bytes.length) {
    const key = Number(varint())
    const number = key >>> 3
    const wire = key & 7
    if (wire === 0) out.push({ number, wire, value: varint() })
    else if (wire === 1 || wire === 5) {
      const size = wire === 1 ? 8 : 4
      const view = new DataView(bytes.buffer, bytes.byteOffset + at, size)
      out.push({ number, wire, value: size === 8 ? view.getBigUint64(0, true) : BigInt(view.getUint32(0, true)) })
      at += size
    } else if (wire === 2) {
      const length = Number(varint())
      if (at + length > bytes.length) throw new Error('truncated field')
      out.push({ number, wire, value: bytes.subarray(at, at + length) })
      at += length
    } else throw new Error(`unsupported wire type ${wire}`)
  }
  return out
}

const text = (value: bigint | Uint8Array): string => Buffer.from(value as Uint8Array).toString('utf8')
const hex = (value: bigint | Uint8Array): string => Buffer.from(value as Uint8Array).toString('hex')
const bytesOf = (value: bigint | Uint8Array): Uint8Array => value as Uint8Array

function anyValue (bytes: Uint8Array): Record<string, unknown> {
  for (const f of fields(bytes)) {
    if (f.number === 1) return { stringValue: text(f.value) }
    if (f.number === 2) return { boolValue: f.value === 1n }
    if (f.number === 3) return { intValue: Number(BigInt.asIntN(64, f.value as bigint)) } // small ints: exact below 2^53
    if (f.number === 4) return { doubleValue: new DataView(new BigUint64Array([f.value as bigint]).buffer).getFloat64(0, true) }
  }
  return {}
}

function keyValue (bytes: Uint8Array): { key: string, value: Record<string, unknown> } {
  let key = ''
  let value: Record<string, unknown> = {}
  for (const f of fields(bytes)) {
    if (f.number === 1) key = text(f.value)
    else if (f.number === 2) value = anyValue(bytesOf(f.value))
  }
  return { key, value }
}

function span (bytes: Uint8Array): Record<string, unknown> {
  const out: Record<string, unknown> = { attributes: [] as unknown[] }
  for (const f of fields(bytes)) {
    switch (f.number) {
      case 1: out.traceId = hex(f.value); break
      case 2: out.spanId = hex(f.value); break
      case 3: out.traceState = text(f.value); break
      case 4: out.parentSpanId = hex(f.value); break
      case 5: out.name = text(f.value); break
      case 6: out.kind = Number(f.value); break
      case 7: out.startTimeUnixNano = String(f.value); break
      case 8: out.endTimeUnixNano = String(f.value); break
      case 9: (out.attributes as unknown[]).push(keyValue(bytesOf(f.value))); break
      case 15: {
        const status: Record<string, unknown> = {}
        for (const s of fields(bytesOf(f.value))) {
          if (s.number === 2) status.message = text(s.value)
          if (s.number === 3) status.code = Number(s.value)
        }
        out.status = status
      }
    }
  }
  return out
}

/** An ExportTraceServiceRequest in protobuf, as its OTLP/JSON shape. */
export function decodeTraceExport (bytes: Uint8Array): { resourceSpans: unknown[] } {
  const resourceSpans: unknown[] = []
  for (const rs of fields(bytes)) {
    if (rs.number !== 1) continue
    const resource: { attributes: unknown[] } = { attributes: [] }
    const scopeSpans: Array<{ spans: unknown[] }> = []
    for (const f of fields(bytesOf(rs.value))) {
      if (f.number === 1) {
        for (const a of fields(bytesOf(f.value))) if (a.number === 1) resource.attributes.push(keyValue(bytesOf(a.value)))
      } else if (f.number === 2) {
        const spans: unknown[] = []
        for (const s of fields(bytesOf(f.value))) if (s.number === 2) spans.push(span(bytesOf(s.value)))
        scopeSpans.push({ spans })
      }
    }
    resourceSpans.push({ resource, scopeSpans })
  }
  return { resourceSpans }
}

/** The number of spans in an ExportTraceServiceRequest in protobuf, without decoding them (the bench's receiver). */
export function countSpans (bytes: Uint8Array): number {
  let count = 0
  for (const rs of fields(bytes)) {
    if (rs.number !== 1) continue
    for (const f of fields(bytesOf(rs.value))) {
      if (f.number === 2) for (const s of fields(bytesOf(f.value))) if (s.number === 2) count++
    }
  }
  return count
}
