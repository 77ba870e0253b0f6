import type { Logger } from 'pino'
import type { RunRecords } from '../store/run-records.ts'
import type { RunScope } from '../run-data.ts'
import type { DeliveryResult } from '../../webhook/webhook-delivery.ts'
import { whileUnavailable } from '../while-unavailable.ts'

/**
 * The `onEnd` of a run's webhook: how its delivery ended (`delivered`, else `failed`, a dropped
 * one too) and the attempts made, written on the run's record (again while the store is down, for
 * about two minutes). A write that fails is logged when there is a `logger` (a plain call's delivery taken over has no record: nothing to log then).
 */
export function recordWebhookEnd (records: RunRecords, scope: RunScope, runId: string, logger?: Logger): (result: DeliveryResult | 'dropped', attempts: number) => void {
  return (result, attempts) => {
    whileUnavailable(async () => { await records.webhookDone(scope, runId, result === 'delivered' ? 'delivered' : 'failed', attempts) }).catch((error: unknown) => {
      logger?.warn({ err: error, runId }, 'webhook result not recorded')
    })
  }
}
