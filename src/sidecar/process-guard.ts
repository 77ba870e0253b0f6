import type { InternalErrorReporter } from '../shared/internal-errors.ts'

/**
 * Keeps the process serving through an exception nobody caught (`uncaughtException`) or a
 * rejection nobody handled (`unhandledRejection`): each is reported once, with its stack and
 * where it came from, and the calls in flight go on. Returns the function that removes the guard.
 */
export function guardProcess (report: InternalErrorReporter): () => void {
  const onException = (error: Error, origin: string): void => { report(error, { origin }) }
  const onRejection = (reason: unknown): void => { report(reason, { origin: 'unhandledRejection' }) }
  process.on('uncaughtException', onException)
  process.on('unhandledRejection', onRejection)
  return () => {
    process.off('uncaughtException', onException)
    process.off('unhandledRejection', onRejection)
  }
}
