const NEWLINE = 0x0a
const CARRIAGE_RETURN = 0x0d

/**
 * Splits a byte stream into NDJSON / JSON Lines records: a line may arrive over several reads,
 * a final line without a newline still counts, and whitespace-only lines are skipped. Splitting
 * happens on bytes, so a multi-byte UTF-8 character split across reads survives (0x0A never
 * occurs inside one). A line longer than `maxBytes` (STREAM_MAX_EVENT_BYTES) stops the splitting:
 * no more than that is ever kept while its end is looked for.
 */
export class NdjsonSplitter {
  readonly #maxBytes: number
  #partial: Buffer[] = []
  #partialBytes = 0
  #over = false

  /** `maxBytes`: the longest line, its CRLF or LF aside. */
  constructor (maxBytes = Infinity) {
    this.#maxBytes = maxBytes
  }

  /** Bytes kept of the line under way (at most the bound and one). */
  get pendingBytes (): number { return this.#partialBytes }

  /** Calls `onLine` for every complete non-empty line in `chunk`; false once a line is longer than the bound (and from then on). */
  push (chunk: Buffer, onLine: (line: string) => void): boolean {
    if (this.#over) return false
    let start = 0
    let newline = chunk.indexOf(NEWLINE)
    while (newline !== -1) {
      let line = chunk.subarray(start, newline)
      if (this.#partial.length > 0) {
        this.#partial.push(line)
        line = Buffer.concat(this.#partial, this.#partialBytes + line.length)
        this.#partial = []
        this.#partialBytes = 0
      }
      if (this.#tooLong(line.length, line[line.length - 1])) return this.#overflow()
      emit(line, onLine)
      start = newline + 1
      newline = chunk.indexOf(NEWLINE, start)
    }
    if (start < chunk.length) {
      // one byte past the bound may be the CR of the line's CRLF
      if (this.#partialBytes + chunk.length - start > this.#maxBytes + 1) return this.#overflow()
      this.#partial.push(chunk.subarray(start))
      this.#partialBytes += chunk.length - start
    }
    return true
  }

  /** The stream ended: a last line without a newline is a record too. False when it is longer than the bound. */
  flush (onLine: (line: string) => void): boolean {
    if (this.#over) return false
    if (this.#partial.length === 0) return true
    const line = Buffer.concat(this.#partial, this.#partialBytes)
    this.#partial = []
    this.#partialBytes = 0
    if (this.#tooLong(line.length, line[line.length - 1])) return this.#overflow()
    emit(line, onLine)
    return true
  }

  #tooLong (length: number, last: number | undefined): boolean {
    return length - (last === CARRIAGE_RETURN ? 1 : 0) > this.#maxBytes
  }

  #overflow (): false {
    this.#over = true
    this.#partial = []
    this.#partialBytes = 0
    return false
  }
}

function emit (bytes: Buffer, onLine: (line: string) => void): void {
  const end = bytes.length > 0 && bytes[bytes.length - 1] === CARRIAGE_RETURN ? bytes.length - 1 : bytes.length
  const line = bytes.toString('utf8', 0, end)
  if (line.trim() !== '') onLine(line)
}
