const NEWLINE = 0x0a
const CARRIAGE_RETURN = 0x0d

/**
 * Splits a byte stream into NDJSON / JSON Lines records: a line may arrive over several reads,
 * a final line without a newline still counts, and whitespace-only lines are skipped. Splitting
 * happens on bytes, so a multi-byte UTF-8 character split across reads survives (0x0A never
 * occurs inside one).
 */
export class NdjsonSplitter {
  #partial: Buffer[] = []

  /** Calls `onLine` for every complete non-empty line in `chunk`. */
  push (chunk: Buffer, onLine: (line: string) => void): void {
    let start = 0
    let newline = chunk.indexOf(NEWLINE)
    while (newline !== -1) {
      let line = chunk.subarray(start, newline)
      if (this.#partial.length > 0) {
        this.#partial.push(line)
        line = Buffer.concat(this.#partial)
        this.#partial = []
      }
      emit(line, onLine)
      start = newline + 1
      newline = chunk.indexOf(NEWLINE, start)
    }
    if (start < chunk.length) this.#partial.push(chunk.subarray(start))
  }

  /** The stream ended: a last line without a newline is a record too. */
  flush (onLine: (line: string) => void): void {
    if (this.#partial.length === 0) return
    const line = Buffer.concat(this.#partial)
    this.#partial = []
    emit(line, onLine)
  }
}

function emit (bytes: Buffer, onLine: (line: string) => void): void {
  const end = bytes.length > 0 && bytes[bytes.length - 1] === CARRIAGE_RETURN ? bytes.length - 1 : bytes.length
  const line = bytes.toString('utf8', 0, end)
  if (line.trim() !== '') onLine(line)
}
