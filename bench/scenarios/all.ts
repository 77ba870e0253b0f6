import type { Scenario } from '../scenario.ts'
import { gateScenario } from './gate.ts'
import { queueScenario } from './queue.ts'
import { getBuildScenario } from './get-build.ts'
import { jsonPostScenario } from './json-post.ts'
import { largeBodyScenario } from './large-body.ts'
import { sseScenario } from './sse.ts'
import { tracingScenario } from './tracing.ts'
import { asyncScenario } from './async.ts'
import { recordedScenario } from './recorded.ts'
import { webhooksScenario } from './webhooks.ts'
import { websocketScenario } from './websocket.ts'

/** Every scenario, in the order a full run measures them. */
export const SCENARIOS: Scenario[] = [jsonPostScenario, sseScenario, webhooksScenario, getBuildScenario, gateScenario, websocketScenario, largeBodyScenario, asyncScenario, recordedScenario, queueScenario, tracingScenario]
