import WebSocket from 'ws'

/**
 * The live heap of a Node process started with `--inspect=127.0.0.1:<port>`: a full garbage
 * collection through the inspector protocol (`HeapProfiler.collectGarbage`), then its
 * `process.memoryUsage().heapUsed`. What a leak raises is exactly this figure; RSS and the heap
 * in use between collections also swing with V8's heap limit and the collector's timing.
 */
export class LiveHeapProbe {
  #nextId = 1
  private constructor (private readonly socket: WebSocket) {}

  /** Connects to the inspector listening on `port` (its first target). */
  static async connect (port: number): Promise<LiveHeapProbe> {
    const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`, { signal: AbortSignal.timeout(5000) })).json() as Array<{ webSocketDebuggerUrl: string }>
    const url = targets[0]?.webSocketDebuggerUrl
    if (url === undefined) throw new Error(`no inspector target on port ${port}`)
    const socket = new WebSocket(url)
    await new Promise((resolve, reject) => { socket.once('open', resolve).once('error', reject) })
    socket.on('error', () => {})
    return new LiveHeapProbe(socket)
  }

  /** Sends one inspector command and waits for its answer (or the connection's close). */
  async #call (method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    const id = this.#nextId++
    return await new Promise((resolve, reject) => {
      const onMessage = (data: WebSocket.RawData): void => {
        const message = JSON.parse(String(data)) as { id?: number, result?: unknown, error?: { message: string } }
        if (message.id !== id) return
        off()
        if (message.error === undefined) resolve(message.result); else reject(new Error(message.error.message))
      }
      const onClose = (): void => { off(); reject(new Error('inspector connection closed')) }
      const off = (): void => { this.socket.off('message', onMessage).off('close', onClose) }
      this.socket.on('message', onMessage).on('close', onClose)
      this.socket.send(JSON.stringify({ id, method, params }))
    })
  }

  /** Collects all garbage, then reads the heap in use, in MB (10⁶ bytes). */
  async liveHeapMb (): Promise<number> {
    await this.#call('HeapProfiler.collectGarbage')
    const evaluated = await this.#call('Runtime.evaluate', { expression: 'process.memoryUsage().heapUsed', returnByValue: true }) as { result: { value: number } }
    return evaluated.result.value / 1e6
  }

  close (): void {
    this.socket.close()
  }
}
