import WebSocket from 'ws'

/**
 * The live heap of a Node process started with `--inspect=127.0.0.1:<port>`: a full garbage
 * collection through the inspector protocol (`HeapProfiler.collectGarbage`), then its
 * `process.memoryUsage().heapUsed`. What a leak raises is exactly this figure; RSS and the heap
 * in use between collections also swing with V8's heap limit and the collector's timing.
 */
export class LiveHeapProbe {
  readonly #socket: WebSocket
  #nextId = 1
  readonly #pending = new Map<number, { resolve: (result: unknown) => void, reject: (error: Error) => void }>()

  private constructor (socket: WebSocket) {
    this.#socket = socket
    socket.on('message', data => {
      const message = JSON.parse(String(data)) as { id?: number, result?: unknown, error?: { message: string } }
      const waiter = message.id === undefined ? undefined : this.#pending.get(message.id)
      if (waiter === undefined) return
      this.#pending.delete(message.id as number)
      if (message.error !== undefined) waiter.reject(new Error(message.error.message))
      else waiter.resolve(message.result)
    })
    socket.on('close', () => {
      for (const waiter of this.#pending.values()) waiter.reject(new Error('inspector connection closed'))
      this.#pending.clear()
    })
  }

  /** Connects to the inspector listening on `port` (its first target). */
  static async connect (port: number): Promise<LiveHeapProbe> {
    const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`, { signal: AbortSignal.timeout(5000) })).json() as Array<{ webSocketDebuggerUrl: string }>
    const url = targets[0]?.webSocketDebuggerUrl
    if (url === undefined) throw new Error(`no inspector target on port ${port}`)
    const socket = new WebSocket(url)
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => { resolve() })
      socket.once('error', reject)
    })
    socket.on('error', () => {})
    return new LiveHeapProbe(socket)
  }

  async #call (method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    const id = this.#nextId++
    return await new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject })
      this.#socket.send(JSON.stringify({ id, method, params }))
    })
  }

  /** Collects all garbage, then reads the heap in use, in MB (10⁶ bytes). */
  async liveHeapMb (): Promise<number> {
    await this.#call('HeapProfiler.collectGarbage')
    const evaluated = await this.#call('Runtime.evaluate', { expression: 'process.memoryUsage().heapUsed', returnByValue: true }) as { result: { value: number } }
    return evaluated.result.value / 1e6
  }

  close (): void {
    this.#socket.close()
  }
}
