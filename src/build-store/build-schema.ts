import { type Static, Type } from '@sinclair/typebox'
import { InvalidBodyError } from '../errors.ts'
import { compileBodyCheck } from './schema-check.ts'

/** Ids in paths and bodies: the store's routes accept nothing else. */
export const ID_PATTERN_SOURCE = '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'

const text = (description: string) => Type.Optional(Type.String({ description }))
const count = (description: string) => Type.Optional(Type.Integer({ minimum: 0, description }))
const flag = (description: string) => Type.Optional(Type.Boolean({ description }))
const digits = (description: string) => Type.Optional(Type.String({ pattern: '^[0-9]+$', description }))
const id = (description: string) => Type.Optional(Type.String({ pattern: ID_PATTERN_SOURCE, description }))
const timestamp = (description: string) => Type.Optional(Type.String({ format: 'date-time', description }))
const openObject = (description: string) => Type.Optional(Type.Object({}, { additionalProperties: true, description }))

/**
 * The Build resource of Get Build, field for field as the seed lists it (its order is the order
 * of the JSON the store sends). Every field is optional; a field not set is absent, never null.
 */
export const BuildSchema = Type.Object({
  id: id('Unique identifier of the build'),
  modelId: id('ID of the app the build belongs to'),
  projectId: id('ID of the project the build belongs to'),
  name: text('Name of the app'),
  revisionName: text('Name of the revision created by this build'),
  status: text('Current status of the build'),
  type: text('Type of the build'),
  createdAt: timestamp('Timestamp of build creation (ISO 8601 UTC, set by the store)'),
  updatedAt: timestamp('Timestamp of last update (ISO 8601 UTC, set by the store)'),
  createdByUserEmail: text('Email address of the creating user'),
  createdByUserIp: text('IP address the build was created from'),
  buildTimeMs: digits('Build duration in milliseconds, as a string'),
  initTimeMs: digits('Deployment initialization duration in milliseconds, as a string'),
  initError: text('Error message from deployment initialization; omitted when not set'),
  imageSizeBytes: count('Size of the built image in bytes'),
  zipSizeBytes: count('Size of the uploaded source archive in bytes'),
  cerebriumVersion: text('Client version used at deployment time'),
  cliVersion: text('Client version that created the build'),
  runtime: Type.Optional(Type.Union([Type.Literal('cortex'), Type.Literal('custom')], { description: 'App runtime: cortex or custom' })),
  runtimeVersion: text('Version of the app runtime'),
  containerRuntime: text('Container runtime version; omitted when not set'),
  pythonVersion: text('Python version used for the build'),
  useUv: flag('Whether uv is used for Python package installation; omitted when not set'),
  dockerBaseImageUrl: text('Base Docker image used'),
  dockerfilePath: text('Path to the Dockerfile, if any'),
  hasDockerAuth: flag('Whether private registry credentials were provided'),
  entrypoint: Type.Optional(Type.Array(Type.String(), { description: 'Command that starts a custom runtime app' })),
  port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535, description: 'Port the app listens on' })),
  healthcheckEndpoint: text('HTTP endpoint used to check app health'),
  readycheckEndpoint: text('HTTP endpoint used to check readiness for traffic'),
  disableAuth: flag('Whether authentication is disabled on the app endpoint'),
  hardware: text('Compute type targeted'),
  hardwareFallbacks: Type.Optional(Type.Array(Type.String(), { description: 'Fallback compute types in priority order; omitted when not set' })),
  hardwareProvider: text('Cloud provider targeted'),
  region: text('Region targeted'),
  computeTier: Type.Optional(Type.Union([Type.Literal('interruptible'), Type.Literal('protected')], { description: 'interruptible or protected; omitted when not set' })),
  cpu: Type.Optional(Type.Number({ minimum: 0, description: 'Number of CPU cores allocated' })),
  memory: Type.Optional(Type.Number({ minimum: 0, description: 'Memory in GB' })),
  gpuCount: count('Number of GPUs allocated'),
  checkpointing: flag('Whether checkpointing is enabled'),
  minReplicaCount: count('Minimum number of replicas'),
  maxReplicaCount: count('Maximum number of replicas'),
  replicaConcurrency: count('Maximum concurrent requests per replica'),
  cooldownPeriod: count('Seconds before an idle replica scales down'),
  scalingMetric: text('Metric used for autoscaling'),
  scalingTarget: count('Target value of the scaling metric'),
  scalingBuffer: count('Extra replicas kept beyond current demand'),
  evaluationIntervalSeconds: count('Seconds between autoscaling evaluations'),
  loadBalancingAlgorithm: text('Load balancing algorithm used'),
  responseGracePeriodSeconds: count('Grace period in seconds for in-flight requests when a replica stops'),
  rollOutDurationSeconds: count('Seconds over which a new version is rolled out'),
  deploymentInitializationTimeout: count('Maximum seconds to wait for deployment initialization'),
  deadlineSeconds: count('Maximum run duration in seconds, if set'),
  originalState: openObject('Configuration before the update, for update builds; omitted when not set'),
  finalState: openObject('Configuration after the update, for update builds; omitted when not set'),
  updateInput: openObject('Configuration changes requested, for update builds; omitted when not set')
}, { additionalProperties: false, title: 'Build', description: 'A build of an app, with its full configuration and status' })

export type Build = Static<typeof BuildSchema>

/** What a PUT stores: the Build without the fields the store sets itself. */
export type BuildFields = Omit<Build, 'id' | 'modelId' | 'projectId' | 'createdAt' | 'updatedAt'>

/** Where a build lives; the ids come from the path. */
export interface BuildKey {
  readonly projectId: string
  readonly appId: string
  readonly buildId: string
}

/** The Build's field names in the order they are sent. */
export const BUILD_FIELD_ORDER: readonly string[] = Object.keys(BuildSchema.properties)

const buildCheck = compileBodyCheck(BuildSchema, 'build')

/**
 * Validates a PUT body for the build at `key` and returns the fields to store. `createdAt` and
 * `updatedAt` are ignored; `id`, `projectId` and `modelId` may be sent only when they match the path.
 */
export function parseBuildInput (body: unknown, key: BuildKey): BuildFields {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new InvalidBodyError('invalid build: the body must be a JSON object')
  }
  const { createdAt: _created, updatedAt: _updated, ...rest } = body as Record<string, unknown>
  const build = buildCheck.parse(rest)
  const { id, projectId, modelId, ...fields } = build
  mustMatch('id', id, key.buildId)
  mustMatch('projectId', projectId, key.projectId)
  mustMatch('modelId', modelId, key.appId)
  return fields
}

function mustMatch (field: string, sent: string | undefined, fromPath: string): void {
  if (sent !== undefined && sent !== fromPath) {
    throw new InvalidBodyError(`invalid build: ${field} "${sent}" does not match the path ("${fromPath}")`)
  }
}

/** The Build as sent: path ids, stored fields and the store's timestamps, in the schema's order. */
export function composeBuild (key: BuildKey, fields: BuildFields, createdAt: Date, updatedAt: Date): Build {
  const all: Record<string, unknown> = {
    ...fields,
    id: key.buildId,
    modelId: key.appId,
    projectId: key.projectId,
    createdAt: createdAt.toISOString(),
    updatedAt: updatedAt.toISOString()
  }
  const ordered: Record<string, unknown> = {}
  for (const name of BUILD_FIELD_ORDER) {
    if (all[name] !== undefined) ordered[name] = all[name]
  }
  return ordered
}
