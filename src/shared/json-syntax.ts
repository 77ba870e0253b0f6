// A JSON syntax check over bytes, chunk by chunk, that builds nothing: the cortex envelope
// splices a valid JSON body in as it came instead of parsing it into objects only to know it
// is JSON (which costs several times the body in memory and most of the CPU of a large call).

const enum S {
  Value, AfterValue, KeyOrEnd, Key, Colon, ValueOrEnd,
  String, Escape, Hex1, Hex2, Hex3, Hex4,
  Minus, Zero, Int, Dot, Frac, Exp, ExpSign, ExpInt,
  Literal, Done
}

const OBJECT = 1
const ARRAY = 2
const LITERALS = ['true', 'false', 'null'].map(word => Buffer.from(word))

const isSpace = (b: number): boolean => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09
const isDigit = (b: number): boolean => b >= 0x30 && b <= 0x39
const isHex = (b: number): boolean => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66)

/** Feeds bytes of one JSON text; `end()` says whether they were exactly one valid JSON value (RFC 8259). */
export class JsonSyntax {
  #state = S.Value
  #stack = new Uint8Array(64)
  #depth = 0
  #key = false
  #literal: Buffer = LITERALS[0] as Buffer
  #literalAt = 0
  #valid = true

  /** Checks the next bytes; false once the text can no longer be valid JSON. */
  push (chunk: Uint8Array): boolean {
    if (!this.#valid) return false
    const length = chunk.length
    for (let i = 0; i < length; i++) {
      let b = chunk[i] as number
      if (this.#state === S.String) {
        // most of a large body is string contents: skip them without the state machine
        while (b !== 0x22 && b !== 0x5c && b >= 0x20) {
          if (++i === length) return true
          b = chunk[i] as number
        }
      }
      if (!this.#byte(b)) {
        this.#valid = false
        return false
      }
    }
    return true
  }

  /** True when all the bytes fed were one complete JSON value, with only JSON whitespace around it. */
  end (): boolean {
    if (!this.#valid) return false
    const s = this.#state
    if (s === S.Zero || s === S.Int || s === S.Frac || s === S.ExpInt) return this.#depth === 0
    return s === S.Done
  }

  #byte (b: number): boolean {
    switch (this.#state) {
      case S.String:
        if (b === 0x22) return this.#closeValue(this.#key)
        if (b === 0x5c) this.#state = S.Escape
        else if (b < 0x20) return false
        return true
      case S.Escape:
        if (b === 0x75) { this.#state = S.Hex1; return true }
        this.#state = S.String
        return b === 0x22 || b === 0x5c || b === 0x2f || b === 0x62 || b === 0x66 || b === 0x6e || b === 0x72 || b === 0x74
      case S.Hex1: case S.Hex2: case S.Hex3:
        this.#state++
        return isHex(b)
      case S.Hex4:
        this.#state = S.String
        return isHex(b)
      case S.Value: case S.ValueOrEnd:
        if (isSpace(b)) return true
        if (b === 0x5d && this.#state === S.ValueOrEnd) return this.#closeContainer(ARRAY)
        return this.#startValue(b)
      case S.AfterValue: case S.Done:
        if (isSpace(b)) return true
        if (this.#depth === 0) return false
        if (b === 0x2c) {
          this.#state = this.#top() === OBJECT ? S.Key : S.Value
          return true
        }
        return this.#closeContainer(b === 0x7d ? OBJECT : b === 0x5d ? ARRAY : 0)
      case S.KeyOrEnd: case S.Key:
        if (isSpace(b)) return true
        if (b === 0x7d && this.#state === S.KeyOrEnd) return this.#closeContainer(OBJECT)
        if (b !== 0x22) return false
        this.#key = true
        this.#state = S.String
        return true
      case S.Colon:
        if (isSpace(b)) return true
        if (b !== 0x3a) return false
        this.#state = S.Value
        return true
      case S.Minus:
        if (b === 0x30) this.#state = S.Zero
        else if (isDigit(b)) this.#state = S.Int
        else return false
        return true
      case S.Zero: case S.Int:
        if (isDigit(b) && this.#state === S.Int) return true
        if (b === 0x2e) { this.#state = S.Dot; return true }
        if (b === 0x65 || b === 0x45) { this.#state = S.Exp; return true }
        return this.#afterNumber(b)
      case S.Dot:
        this.#state = S.Frac
        return isDigit(b)
      case S.Frac:
        if (isDigit(b)) return true
        if (b === 0x65 || b === 0x45) { this.#state = S.Exp; return true }
        return this.#afterNumber(b)
      case S.Exp:
        if (b === 0x2b || b === 0x2d) { this.#state = S.ExpSign; return true }
        this.#state = S.ExpInt
        return isDigit(b)
      case S.ExpSign:
        this.#state = S.ExpInt
        return isDigit(b)
      case S.ExpInt:
        if (isDigit(b)) return true
        return this.#afterNumber(b)
      case S.Literal:
        if (b !== this.#literal[this.#literalAt]) return false
        if (++this.#literalAt === this.#literal.length) return this.#closeValue(false)
        return true
    }
  }

  #startValue (b: number): boolean {
    switch (b) {
      case 0x22: this.#key = false; this.#state = S.String; return true
      case 0x7b: this.#open(OBJECT); this.#state = S.KeyOrEnd; return true
      case 0x5b: this.#open(ARRAY); this.#state = S.ValueOrEnd; return true
      case 0x2d: this.#state = S.Minus; return true
      case 0x30: this.#state = S.Zero; return true
      case 0x74: case 0x66: case 0x6e:
        this.#literal = LITERALS[b === 0x74 ? 0 : b === 0x66 ? 1 : 2] as Buffer
        this.#literalAt = 1
        this.#state = S.Literal
        return true
      default:
        if (isDigit(b)) { this.#state = S.Int; return true }
        return false
    }
  }

  /** A number ends at the first byte that cannot continue it: that byte is read as what follows a value. */
  #afterNumber (b: number): boolean {
    this.#closeValue(false)
    return this.#byte(b)
  }

  #closeValue (wasKey: boolean): boolean {
    this.#state = wasKey ? S.Colon : (this.#depth === 0 ? S.Done : S.AfterValue)
    return true
  }

  #open (kind: number): void {
    if (this.#depth === this.#stack.length) {
      const grown = new Uint8Array(this.#stack.length * 2)
      grown.set(this.#stack)
      this.#stack = grown
    }
    this.#stack[this.#depth++] = kind
  }

  #top (): number { return this.#stack[this.#depth - 1] as number }

  #closeContainer (kind: number): boolean {
    if (this.#depth === 0 || this.#top() !== kind) return false
    this.#depth--
    return this.#closeValue(false)
  }
}
