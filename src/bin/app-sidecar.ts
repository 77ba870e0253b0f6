#!/usr/bin/env node
import { applyBuildSettings } from '../config/build-settings.ts'
import { packageVersion } from '../config/package-version.ts'
import { loadSidecarConfig, type SidecarConfig, sidecarHelp } from '../config/sidecar-config.ts'
import { ConfigError } from '../errors.ts'
import { portTakenHint } from '../sidecar/listeners.ts'
import { guardProcess } from '../sidecar/process-guard.ts'
import { startSidecar } from '../sidecar/sidecar.ts'
import { setFlagsFromString } from 'node:v8'

// undici parses HTTP/1 with llhttp compiled to WebAssembly. On Node 20, V8's optimizing tier for
// it costs ~9 MB of RSS from the first app request on (62.6 against 71.9 MB after one call) for
// no CPU we could measure (json-post, same run): the baseline compiler's code is kept. Set before
// any request is made (the flag is read when a module compiles); Node 24 is unchanged by it.
setFlagsFromString('--liftoff-only')

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(sidecarHelp())
  process.exit(0)
}
if (process.argv.includes('--version')) {
  process.stdout.write(`${packageVersion()}\n`)
  process.exit(0)
}

let config: SidecarConfig
try {
  config = loadSidecarConfig()
} catch (error) {
  if (!(error instanceof ConfigError)) throw error
  process.stderr.write(`app-sidecar: invalid configuration: ${error.message}\n`)
  process.exit(2)
}

try {
  config = await applyBuildSettings(config, process.env)
} catch (error) {
  if (!(error instanceof ConfigError)) throw error
  process.stderr.write(`app-sidecar: ${error.message}\n`)
  process.exit(1)
}

const sidecar = await startSidecar(config).catch((error: NodeJS.ErrnoException) => {
  if (error instanceof ConfigError) {
    process.stderr.write(`app-sidecar: invalid configuration: ${error.message}\n`)
    process.exit(2)
  }
  const hint = portTakenHint(error, { PORT: config.port, ADMIN_PORT: config.adminPort })
  process.stderr.write(`app-sidecar: cannot start: ${error.code ?? ''} ${error.message}${hint}\n`)
  process.exit(1)
})

// from here on, no exception may stop the process: it fails what it belongs to, and is counted
guardProcess(sidecar.reportInternal)

let stopping = false
async function stop (signal: string): Promise<void> {
  if (stopping) return
  stopping = true
  sidecar.logger.info({ signal }, 'stopping')
  const clean = await sidecar.drain(config.responseGracePeriodSeconds)
  sidecar.logger.info({ clean }, 'stopped')
  sidecar.logger.flush(() => { process.exit(0) })
}
process.once('SIGTERM', () => { void stop('SIGTERM') })
process.once('SIGINT', () => { void stop('SIGINT') })
