import t from 'tap'
import { BUILD_FIELD_ORDER, BuildSchema, composeBuild, parseBuildInput } from '../../src/build-store/build-schema.ts'
import { isDateTime } from '../../src/build-store/schema-check.ts'
import { FULL_BUILD } from './build-fixtures.ts'

/** The seed's Build table, row by row: field and type as written there. */
const SEED_TABLE: Array<[string, string]> = [
  ['id', 'string'], ['modelId', 'string'], ['projectId', 'string'], ['name', 'string'], ['revisionName', 'string'],
  ['status', 'string'], ['type', 'string'], ['createdAt', 'string'], ['updatedAt', 'string'], ['createdByUserEmail', 'string'],
  ['createdByUserIp', 'string'], ['buildTimeMs', 'string'], ['initTimeMs', 'string'], ['initError', 'string'],
  ['imageSizeBytes', 'integer'], ['zipSizeBytes', 'integer'], ['cerebriumVersion', 'string'], ['cliVersion', 'string'],
  ['runtime', 'string'], ['runtimeVersion', 'string'], ['containerRuntime', 'string'], ['pythonVersion', 'string'],
  ['useUv', 'boolean'], ['dockerBaseImageUrl', 'string'], ['dockerfilePath', 'string'], ['hasDockerAuth', 'boolean'],
  ['entrypoint', 'array of strings'], ['port', 'integer'], ['healthcheckEndpoint', 'string'], ['readycheckEndpoint', 'string'],
  ['disableAuth', 'boolean'], ['hardware', 'string'], ['hardwareFallbacks', 'array'], ['hardwareProvider', 'string'],
  ['region', 'string'], ['computeTier', 'string'], ['cpu', 'number'], ['memory', 'number'], ['gpuCount', 'integer'],
  ['checkpointing', 'boolean'], ['minReplicaCount', 'integer'], ['maxReplicaCount', 'integer'], ['replicaConcurrency', 'integer'],
  ['cooldownPeriod', 'integer'], ['scalingMetric', 'string'], ['scalingTarget', 'integer'], ['scalingBuffer', 'integer'],
  ['evaluationIntervalSeconds', 'integer'], ['loadBalancingAlgorithm', 'string'], ['responseGracePeriodSeconds', 'integer'],
  ['rollOutDurationSeconds', 'integer'], ['deploymentInitializationTimeout', 'integer'], ['deadlineSeconds', 'integer'],
  ['originalState', 'object'], ['finalState', 'object'], ['updateInput', 'object']
]

interface JsonSchema { type?: string, anyOf?: JsonSchema[], items?: JsonSchema }
const typeOf = (schema: JsonSchema): string => {
  if (schema.anyOf !== undefined) {
    const types = new Set(schema.anyOf.map(typeOf))
    return types.size === 1 ? [...types][0] as string : 'mixed'
  }
  if (schema.type === 'array' && schema.items?.type === 'string') return 'array of strings'
  return schema.type ?? 'untyped'
}

const KEY = { projectId: 'proj', appId: 'app', buildId: 'b-1' }

t.test('the Build schema has every field of the seed\'s table, in its order, with its type, none required', async t => {
  const schema = JSON.parse(JSON.stringify(BuildSchema)) as { properties: Record<string, JsonSchema>, required?: string[], additionalProperties: boolean }
  t.same(BUILD_FIELD_ORDER, SEED_TABLE.map(([field]) => field))
  for (const [field, type] of SEED_TABLE) {
    const declared = typeOf(schema.properties[field] as JsonSchema)
    t.equal(type === 'array' ? declared.replace(' of strings', '') : declared, type, field)
  }
  t.equal(schema.required, undefined, 'every field optional')
  t.equal(schema.additionalProperties, false, 'unknown fields refused')
  t.same(Object.keys(FULL_BUILD).sort(), BUILD_FIELD_ORDER.filter(f => !['id', 'modelId', 'projectId', 'createdAt', 'updatedAt'].includes(f)).sort(),
    'the fixture sets every writable field')
})

t.test('parseBuildInput: the fields to store, without ids and timestamps', async t => {
  t.same(parseBuildInput({ ...FULL_BUILD, id: 'b-1', projectId: 'proj', modelId: 'app', createdAt: 1, updatedAt: null }, KEY), FULL_BUILD)
  t.same(parseBuildInput({}, KEY), {})
  t.throws(() => parseBuildInput({ id: 'b-2' }, KEY), { status: 400, message: 'invalid build: id "b-2" does not match the path ("b-1")' })
  t.throws(() => parseBuildInput([], KEY), { status: 400, code: 'STORE_INVALID_BODY', message: 'invalid build: the body must be a JSON object' })
  t.throws(() => parseBuildInput({ originalState: { nested: [1, { deep: true }] }, zipSizeBytes: 'big' }, KEY), { message: 'invalid build: zipSizeBytes: expected integer' })
  t.throws(() => parseBuildInput({ id: '../etc' }, KEY), { message: 'invalid build: id: expected string to match \'^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$\'' })
  t.same(parseBuildInput({ originalState: { any: { shape: [1] } } }, KEY), { originalState: { any: { shape: [1] } } }, 'state objects are open')
})

t.test('composeBuild: path ids and timestamps, in the table\'s order, nothing undefined', async t => {
  const created = new Date('2030-01-02T03:04:05.678Z')
  const updated = new Date('2030-01-02T03:04:06.000Z')
  const build = composeBuild(KEY, { port: 80, status: 'ok', initError: undefined }, created, updated)
  t.equal(JSON.stringify(build), '{"id":"b-1","modelId":"app","projectId":"proj","status":"ok","createdAt":"2030-01-02T03:04:05.678Z","updatedAt":"2030-01-02T03:04:06.000Z","port":80}')
  t.notOk('initError' in build)
})

t.test('isDateTime: RFC 3339 with a time zone, real dates only', async t => {
  for (const good of ['2030-01-01T00:00:00Z', '2030-01-01T00:00:00.123456+02:00', '2032-02-29T23:59:59-05:30', '2030-01-01t00:00:00z']) t.ok(isDateTime(good), good)
  for (const bad of ['2030-01-01', '2030-01-01T00:00:00', '2030-02-30T00:00:00Z', '2031-02-29T00:00:00Z', '2030-01-01T24:30:00Z', '2030-13-01T00:00:00Z', 'tomorrow', '1924992000']) t.notOk(isDateTime(bad), bad)
})
