#!/usr/bin/env node
import { text } from 'node:stream/consumers'
import { packageVersion } from '../config/package-version.ts'
import { ConfigError, DataDirInUseError } from '../errors.ts'
import { runStoreCommand } from '../build-store/store-cli.ts'
import { loadStoreConfig, startBuildStore, type StoreConfig, storeHelp } from '../build-store/index.ts'

const args = process.argv.slice(2)

if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(storeHelp())
  process.exit(0)
}
if (args.includes('--version')) {
  process.stdout.write(`${packageVersion()}\n`)
  process.exit(0)
}

if (args.length > 0) {
  const code = await runStoreCommand(args, {
    env: process.env,
    stdout: chunk => { process.stdout.write(chunk) },
    stderr: chunk => { process.stderr.write(chunk) },
    readStdin: () => text(process.stdin)
  })
  process.exitCode = code
} else {
  let config: StoreConfig
  try {
    config = loadStoreConfig()
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    process.stderr.write(`build-store: invalid configuration: ${error.message}\n`)
    process.exit(2)
  }

  const store = await startBuildStore(config).catch((error: NodeJS.ErrnoException) => {
    if (error instanceof DataDirInUseError) process.stderr.write(`build-store: ${error.message}\n`)
    else process.stderr.write(`build-store: cannot start: ${error.code ?? ""} ${String(error.message).replace(/\s+/g, " ")}\n`)
    process.exit(1)
  })

  let stopping = false
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return
    stopping = true
    store.logger.info({ signal }, 'stopping')
    await store.close()
    store.logger.info('stopped')
    store.logger.flush(() => { process.exit(0) })
  }
  process.once('SIGTERM', () => { void stop('SIGTERM') })
  process.once('SIGINT', () => { void stop('SIGINT') })
}
