import fc from 'fast-check'
import t from 'tap'
import { JsonSyntax } from '../../src/shared/json-syntax.ts'

/** What JSON.parse says of a text: the reference the byte check must agree with. */
function parses (text: string): boolean {
  try { JSON.parse(text); return true } catch { return false }
}

/** The byte check over `text`, fed in pieces cut at `cuts` (chunk boundaries anywhere, even mid-character). */
function check (text: string, cuts: number[] = []): boolean {
  const bytes = Buffer.from(text)
  const syntax = new JsonSyntax()
  let at = 0
  for (const cut of [...cuts].sort((a, b) => a - b)) {
    const end = Math.min(cut, bytes.length)
    if (end > at) syntax.push(bytes.subarray(at, end))
    at = Math.max(at, end)
  }
  syntax.push(bytes.subarray(at))
  return syntax.end()
}

t.test('agrees with JSON.parse on hand-picked texts', async t => {
  const cases = [
    '0', '-0', '12', '-12.5e+3', '1E5', '0.0', '"x"', 'true', 'false', 'null', ' [1, 2 ,3] ', '{}', '[]', '{"a":{"b":[{}]}}',
    '"\\u00e9\\n\\"\\\\\\/"', '"é✓🌍"', '\t\r\n{"k" : "v"}\n',
    '', ' ', '01', '1.', '.5', '-', '+1', '1e', '1e+', '0x10', 'NaN', 'Infinity', 'tru', 'truee', 'nul', '[1,]', '[,1]',
    '{"a":1,}', '{"a" 1}', '{a:1}', "'x'", '"a\nb"', '"\\x"', '"\\u12"', '"\\u12G4"', '[1 2]', '{"a":1}{}', '1 2', '[', ']',
    '{"a":[1}', '["a"}', '\u00a0{}', '\ufeff{}', '"unterminated', '[1]]', '{"a":1}}', 'true false'
  ]
  for (const text of cases) t.equal(check(text), parses(text), JSON.stringify(text))
})

t.test('every JSON value is valid, cut into chunks anywhere', async () => {
  fc.assert(fc.property(fc.json(), fc.array(fc.nat(200)), (text, cuts) => check(text, cuts)))
  fc.assert(fc.property(fc.jsonValue().map(value => JSON.stringify(value, null, 2)), fc.array(fc.nat(400)), (text, cuts) => check(text, cuts)))
})

t.test('agrees with JSON.parse on arbitrary and mutated texts', async () => {
  fc.assert(fc.property(fc.string({ unit: 'grapheme' }), fc.array(fc.nat(50)), (text, cuts) => check(text, cuts) === parses(text)), { numRuns: 2000 })
  const mutated = fc.tuple(fc.json(), fc.nat(), fc.constantFrom('', ',', ']', '}', '"', '\\', ':', '-', '0', 'e', '.', ' ', '\n', 'x'))
    .map(([text, at, insert]) => text.slice(0, at % (text.length + 1)) + insert + text.slice(at % (text.length + 1) + 1))
  fc.assert(fc.property(mutated, fc.array(fc.nat(100)), (text, cuts) => check(text, cuts) === parses(text)), { numRuns: 5000 })
})

t.test('deep nesting costs a growing stack, not recursion', async t => {
  const depth = 100_000
  t.equal(check('['.repeat(depth) + ']'.repeat(depth)), true)
  t.equal(check('['.repeat(depth) + ']'.repeat(depth - 1)), false)
  t.equal(check('{"a":'.repeat(1000) + '1' + '}'.repeat(1000)), true)
})
