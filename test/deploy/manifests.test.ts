// The Kubernetes manifests and the image they run: valid against the Kubernetes schemas, and holding
// the security and lifecycle settings the example once lost (issue 13), so it cannot rot again.
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parseAllDocuments } from 'yaml'
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1'
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1'
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1'
import {
  ConfigMap, type IContainer, type ISecurityContext, Namespace, Secret, Service, ServiceAccount
} from 'kubernetes-models/v1'
import { loadSidecarConfig, SIDECAR_VARIABLES } from '../../src/config/sidecar-config.ts'
import { loadStoreConfig, storeHelp } from '../../src/build-store/store-config.ts'
import {
  components, containersOf, DEPLOY, deployments, EXAMPLE_SUFFIX, exampleFiles, examples, findContainer, httpProbe, IMAGE_NAME,
  STORE_IMAGE_NAME,
  kustomization, listed, literalEnv, manifests, matchesLabels, podSpecOf, resolvePort, ROOT, RUN_STORE, statefulSets, yamlFiles,
  deploymentSelectedBy, containerWithPort
} from '../helpers/deploy-manifests.ts'

/** bench/results/latest.md, json-post (Node 20): the sidecar's measured peaks and CPU. */
const SIDECAR_PEAK_RSS_1000_CONNECTIONS = 166.0e6
const SIDECAR_PEAK_RSS_1000_RPS = 125.0e6
const SIDECAR_VCPU_AT_1000_RPS = 0.32
/** A model that loads for minutes must not be restarted by liveness in the meantime. */
const MIN_APP_STARTUP_SECONDS = 300

interface Validatable { validate: () => void }
type ModelFactory = (data: unknown) => Validatable
const model = (Ctor: new (data: never) => Validatable): ModelFactory => data => new Ctor(data as never)

/** The kinds deploy/ may hold, each validated by its schema; a bare Pod is deliberately absent. */
const MODELS: Record<string, ModelFactory> = {
  'v1/Namespace': model(Namespace),
  'v1/Service': model(Service),
  'v1/ConfigMap': model(ConfigMap),
  'v1/ServiceAccount': model(ServiceAccount),
  'v1/Secret': model(Secret),
  'apps/v1/Deployment': model(Deployment),
  'apps/v1/StatefulSet': model(StatefulSet),
  // an example only (KEDA's CRD): its fields are checked in the autoscaling test
  'keda.sh/v1alpha1/ScaledObject': () => ({ validate: () => {} }),
  'networking.k8s.io/v1/NetworkPolicy': model(NetworkPolicy),
  'policy/v1/PodDisruptionBudget': model(PodDisruptionBudget)
}

const UNITS: Record<string, number> = { m: 1e-3, '': 1, k: 1e3, K: 1e3, M: 1e6, G: 1e9, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30 }
function quantity (value: string | number | undefined): number {
  const match = /^([0-9.]+)(m|k|K|M|G|Ki|Mi|Gi)?$/.exec(String(value))
  if (match === null) return Number.NaN
  return Number(match[1]) * (UNITS[match[2] ?? ''] ?? Number.NaN)
}

// ── Dockerfile ──────────────────────────────────────────────────────────────────────────────

interface Instruction { op: string, args: string }
interface Stage { from: string, name: string | undefined, instructions: Instruction[] }

function parseDockerfile (text: string): Stage[] {
  const lines = text.replace(/\\\r?\n/g, ' ').split(/\r?\n/).map(l => l.trim()).filter(l => l !== '' && !l.startsWith('#'))
  const stages: Stage[] = []
  for (const line of lines) {
    const [op = '', ...rest] = line.split(/\s+/)
    const instruction = { op: op.toUpperCase(), args: rest.join(' ') }
    if (instruction.op === 'FROM') {
      const [from = '', as, name] = rest
      stages.push({ from, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] })
    } else if (instruction.op !== 'ARG' || stages.length > 0) {
      const stage = stages.at(-1)
      if (stage === undefined) throw new Error(`Dockerfile: ${instruction.op} before FROM`)
      stage.instructions.push(instruction)
    }
  }
  return stages
}

const stages = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))
/** The last stage, the default target: the sidecar. */
const runtime = stages.at(-1) as Stage
const buildStage = stages.find(s => s.name === 'build')
const storeStage = stages.find(s => s.name === 'build-store')
/** The stage that builds a container's image. */
const stageOfImage = (image: string | undefined): Stage | undefined => image === STORE_IMAGE_NAME ? storeStage : image === IMAGE_NAME ? runtime : undefined
const last = (stage: Stage, op: string): string | undefined => stage.instructions.filter(i => i.op === op).at(-1)?.args
const execForm = (args: string | undefined): unknown => args === undefined ? undefined : JSON.parse(args)
const buildConfig = JSON.parse(readFileSync(join(ROOT, 'tsconfig.build.json'), 'utf8')) as { compilerOptions: { rootDir: string, outDir: string } }

/** Where a path inside the image comes from in this repository: /app/dist/x.js is built from src/x.ts. */
function sourceOfImagePath (path: string): string | undefined {
  const prefix = `/app/${buildConfig.compilerOptions.outDir}/`
  if (!path.startsWith(prefix) || !path.endsWith('.js')) return undefined
  return join(ROOT, buildConfig.compilerOptions.rootDir, path.slice(prefix.length).replace(/\.js$/, '.ts'))
}

// ── tests ───────────────────────────────────────────────────────────────────────────────────

t.test('kustomization.yaml lists every manifest, and only files that exist', async t => {
  t.ok(listed.length > 0, 'resources: is not empty')
  t.same([...kustomization.resources ?? []].sort(), yamlFiles.filter(f => !f.endsWith(EXAMPLE_SUFFIX)), 'every YAML file but the examples is listed')
  for (const { dir, own, files, listed } of components) {
    t.match(own, { apiVersion: 'kustomize.config.k8s.io/v1alpha1', kind: 'Component' }, `${dir}: a Kustomize component`)
    t.same([...listed].sort(), files.map(f => join(dir, f)), `${dir}: every YAML file is listed`)
  }
  for (const file of exampleFiles) t.notOk(listed.includes(file), `${file} (an example) is not applied`)
  t.equal(kustomization.namespace, 'app-sidecar', 'one namespace for everything')
  for (const name of [IMAGE_NAME, STORE_IMAGE_NAME]) {
    const image = kustomization.images?.find(i => i.name === name)
    t.match(image, { newName: /\S/, newTag: /^(?!latest$)\S+$/ }, `${name}: the image is pinned to a tag in one place`)
  }
})

t.test('every manifest is valid against the Kubernetes schemas', async t => {
  t.ok(manifests.length >= 7, `found ${manifests.length} objects`)
  for (const m of [...manifests, ...examples]) {
    const apiVersion = String(m.data.apiVersion)
    const factory = MODELS[`${apiVersion}/${m.kind}`]
    if (factory === undefined) {
      t.fail(`${m.file}: ${apiVersion} ${m.kind} is not a kind deploy/ may hold (workloads are Deployments)`)
      continue
    }
    t.doesNotThrow(() => { factory(m.data).validate() }, `${m.file}: ${m.kind} ${m.name}`)
    t.match(m.name, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, `${m.file}: a DNS-1123 name`)
  }
  t.notOk(manifests.some(m => m.kind === 'Secret'), 'no Secret (and so no secret value) among the applied manifests')
  const namespace = manifests.find(m => m.kind === 'Namespace')
  t.match(namespace?.data, { metadata: { name: kustomization.namespace, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } } },
    'the namespace enforces the "restricted" Pod Security Standard')
})

t.test('every pod and container runs non-root, read-only, without capabilities, under RuntimeDefault seccomp', async t => {
  const [uid, gid] = (last(runtime, 'USER') ?? '').split(':').map(Number)
  t.ok(deployments.length >= 2, 'the app and the build store')
  for (const { name, object, kind } of [...deployments, ...statefulSets]) {
    const ours = kind === 'Deployment' // our image; the StatefulSet runs Redis's
    const pod = podSpecOf(object)
    t.equal(pod.automountServiceAccountToken, false, `${name}: no API token mounted`)
    t.equal(pod.enableServiceLinks, false, `${name}: no *_PORT variables injected into the config`)
    t.notOk(pod.hostNetwork === true || pod.hostPID === true || pod.hostIPC === true, `${name}: no host namespaces`)
    t.equal(pod.securityContext?.seccompProfile?.type, 'RuntimeDefault', `${name}: pod seccomp RuntimeDefault`)
    for (const volume of pod.volumes ?? []) {
      t.ok(volume.emptyDir !== undefined || volume.secret !== undefined || volume.configMap !== undefined || volume.projected !== undefined,
        `${name}: volume ${volume.name} is a kind the restricted standard allows`)
    }
    for (const c of containersOf(pod)) {
      const at = `${name}/${c.name}`
      const own: ISecurityContext = c.securityContext ?? {}
      const podLevel = pod.securityContext ?? {}
      t.equal(own.runAsNonRoot ?? podLevel.runAsNonRoot, true, `${at}: runAsNonRoot`)
      const user = own.runAsUser ?? podLevel.runAsUser
      t.ok(Number.isInteger(user) && (user ?? 0) > 0, `${at}: numeric non-root uid ${user}`)
      if (ours) {
        t.equal(user, uid, `${at}: runAsUser is the image's numeric USER`)
        t.equal(own.runAsGroup ?? podLevel.runAsGroup, gid, `${at}: runAsGroup is the image's numeric group`)
      }
      t.equal(own.readOnlyRootFilesystem, true, `${at}: readOnlyRootFilesystem`)
      t.equal(own.allowPrivilegeEscalation, false, `${at}: allowPrivilegeEscalation false`)
      t.notOk(own.privileged, `${at}: not privileged`)
      t.same(own.capabilities, { drop: ['ALL'] }, `${at}: every capability dropped, none added`)
      t.equal(own.seccompProfile?.type ?? podLevel.seccompProfile?.type, 'RuntimeDefault', `${at}: seccomp RuntimeDefault`)
      const tmp = c.volumeMounts?.find(v => v.mountPath === '/tmp')
      t.ok(tmp !== undefined && pod.volumes?.find(v => v.name === tmp.name)?.emptyDir !== undefined, `${at}: a writable emptyDir at /tmp`)
      const { requests, limits } = c.resources ?? {}
      for (const resource of ['cpu', 'memory']) {
        const request = quantity(requests?.[resource])
        const limit = quantity(limits?.[resource])
        t.ok(request > 0 && limit >= request, `${at}: ${resource} request ${requests?.[resource]} ≤ limit ${limits?.[resource]}`)
      }
      if (!ours) {
        t.match(c.image, /^[a-z0-9./-]+:(?!latest$)[\w.-]+$/, `${at}: ${c.image} pinned to a tag`)
        continue
      }
      t.equal(c.image, c.name === 'build-store' ? STORE_IMAGE_NAME : IMAGE_NAME, `${at}: runs the project's image for it (tagged by kustomization.yaml)`)
      const stage = stageOfImage(c.image)
      if (stage === undefined) continue
      const entry = (c.command ?? execForm(last(stage, 'ENTRYPOINT')) ?? []) as string[]
      const script = (c.command === undefined ? (c.args ?? []) : c.command.slice(1))[0]
      t.same(entry.slice(0, 1), ['node'], `${at}: node runs it`)
      const source = sourceOfImagePath(script ?? '')
      t.ok(source !== undefined && existsSync(source), `${at}: ${script} is in the image (built from ${source})`)
    }
  }
})

t.test('the app pod: the sidecar fronts a loopback app, probes on the admin port, the app outlives the drain', async t => {
  const { pod, container: sidecar } = findContainer('sidecar')
  const app = pod.containers.find(c => c.name !== 'sidecar')
  if (app === undefined) throw new Error('the app pod has no app container')
  const env = literalEnv(sidecar)
  for (const name of Object.keys(env)) {
    t.ok(SIDECAR_VARIABLES.some(v => v.name === name), `${name} is a sidecar variable`)
  }
  const config = loadSidecarConfig(env)
  t.equal(config.appUrl.hostname, '127.0.0.1', 'APP_URL is loopback: the app is reachable only through the sidecar')
  t.notOk(app.ports !== undefined && app.ports.length > 0, 'the app container declares no port')
  t.equal(resolvePort('http', sidecar), config.port, 'port "http" is the sidecar\'s PORT')
  t.equal(resolvePort('admin', sidecar), config.adminPort, 'port "admin" is the sidecar\'s ADMIN_PORT')

  t.same(httpProbe(sidecar.startupProbe, sidecar), { path: '/livez', port: config.adminPort }, 'sidecar startup: /livez on admin')
  t.same(httpProbe(sidecar.livenessProbe, sidecar), { path: '/livez', port: config.adminPort }, 'sidecar liveness: /livez on admin')
  t.same(httpProbe(sidecar.readinessProbe, sidecar), { path: '/readyz', port: config.adminPort }, 'sidecar readiness: /readyz on admin')
  t.same(httpProbe(app.startupProbe, app), { path: '/healthz', port: config.adminPort }, 'app startup: /healthz on admin')
  t.same(httpProbe(app.livenessProbe, app), { path: '/healthz', port: config.adminPort }, 'app liveness: /healthz on admin')
  const startup = app.startupProbe ?? {}
  const startupSeconds = (startup.periodSeconds ?? 10) * (startup.failureThreshold ?? 3)
  t.ok(startupSeconds >= MIN_APP_STARTUP_SECONDS, `the app may take ${startupSeconds} s to start before liveness counts`)

  t.ok(env.RESPONSE_GRACE_PERIOD_SECONDS !== undefined, 'RESPONSE_GRACE_PERIOD_SECONDS is set explicitly')
  const drain = config.responseGracePeriodSeconds
  const preStopSleep = app.lifecycle?.preStop?.sleep?.seconds ?? 0
  const grace = pod.terminationGracePeriodSeconds ?? 30
  t.ok(preStopSleep >= drain, `the app keeps serving (preStop sleep ${preStopSleep} s) while the sidecar drains (${drain} s)`)
  t.ok(grace > preStopSleep && grace > drain, `terminationGracePeriodSeconds ${grace} is above the preStop sleep and the drain`)

  const requests = sidecar.resources?.requests ?? {}
  const limits = sidecar.resources?.limits ?? {}
  t.ok(quantity(limits.memory) > SIDECAR_PEAK_RSS_1000_CONNECTIONS, `sidecar memory limit ${limits.memory} is above the measured 166 MB peak`)
  t.ok(quantity(requests.memory) >= SIDECAR_PEAK_RSS_1000_RPS, `sidecar memory request ${requests.memory} covers the measured 125 MB at 1,000 req/s`)
  t.ok(quantity(requests.cpu) >= SIDECAR_VCPU_AT_1000_RPS, `sidecar cpu request ${requests.cpu} covers the measured 0.32 vCPU at 1,000 req/s`)
})

t.test('Services expose only the public ports, never the admin port nor the app', async t => {
  const { container: sidecar } = findContainer('sidecar')
  const { container: store } = findContainer('build-store')
  const expected: Record<string, { container: IContainer, port: number }> = {
    'hello-app': { container: sidecar, port: resolvePort('http', sidecar) ?? -1 },
    'build-store': { container: store, port: resolvePort('http', store) ?? -1 }
  }
  const services = manifests.filter(m => m.kind === 'Service' && m.name !== RUN_STORE)
  t.same(services.map(s => s.name).sort(), Object.keys(expected).sort(), 'one Service per Deployment (and the run store\'s, below)')
  for (const s of services) {
    const service = s.data as unknown as Service
    const target = deploymentSelectedBy(service.spec?.selector)
    const ports = (service.spec?.ports ?? []).map(p => containerWithPort(target, p.targetPort ?? p.port))
    t.same(ports, [expected[s.name]], `${s.name}: exactly one port, to ${expected[s.name]?.container.name}:${expected[s.name]?.port}`)
    t.not(service.spec?.type, 'NodePort', `${s.name}: not opened on every node`)
  }
})

t.test('the build store reads DATABASE_URL from a Secret; no secret value sits in a manifest', async t => {
  const { pod, container: store } = findContainer('build-store')
  t.equal(store.image, STORE_IMAGE_NAME, 'the build store\'s own image')
  t.same(store.args, ['/app/dist/bin/build-store.js'], 'its bin')
  const databaseUrl = store.env?.find(e => e.name === 'DATABASE_URL')
  t.ok(databaseUrl?.value === undefined && databaseUrl?.valueFrom?.secretKeyRef?.key === 'DATABASE_URL', 'DATABASE_URL comes from a Secret')
  const help = storeHelp()
  const env = literalEnv(store)
  for (const name of (store.env ?? []).map(e => e.name)) t.match(help, new RegExp(`\\n  ${name} `), `${name} is a store variable`)
  const config = loadStoreConfig({ ...env, DATABASE_URL: 'postgres://user:pw@db.example:5432/store' })
  const port = resolvePort('http', store)
  t.equal(config.port, port, 'the store listens on its declared port')
  for (const probe of [store.startupProbe, store.livenessProbe, store.readinessProbe]) {
    t.same(httpProbe(probe, store), { path: '/healthz', port }, 'store probe: /healthz')
  }
  t.equal(pod.containers.length, 1, 'the store runs alone in its pod')

  for (const { name, object } of deployments) {
    for (const c of containersOf(podSpecOf(object))) {
      for (const e of c.env ?? []) {
        if (/TOKEN|SECRET|PASSWORD|DATABASE_URL|_KEY$/.test(e.name)) {
          t.ok(e.value === undefined && e.valueFrom?.secretKeyRef !== undefined, `${name}/${c.name}: ${e.name} from a Secret, not a literal`)
        }
      }
    }
  }
  const refs = (store.env ?? []).flatMap(e => e.valueFrom?.secretKeyRef === undefined ? [] : [e.valueFrom.secretKeyRef])
  for (const example of examples.filter(e => e.kind !== 'ScaledObject')) { // the KEDA example: in the autoscaling test
    const secret = example.data as unknown as Secret
    t.equal(example.kind, 'Secret', `${example.file} is a Secret`)
    t.match(secret.metadata?.annotations, { 'app-sidecar.dev/example': /placeholder/ }, `${example.file} is marked as an example`)
    for (const [key, value] of Object.entries(secret.stringData ?? {})) t.match(value, /CHANGE-ME/, `${example.file}: ${key} is a placeholder`)
    t.same(secret.data, undefined, `${example.file}: no opaque (base64) value`)
    for (const ref of refs) {
      t.equal(ref.name, secret.metadata?.name, `the store's secretKeyRef names ${example.name}`)
      t.ok(Object.hasOwn(secret.stringData ?? {}, ref.key), `${example.file} shows the key ${ref.key}`)
    }
  }
  t.ok(examples.length > 0 || refs.length === 0, 'an example shows the Secret the store needs')
})

t.test('the run store: a Redis StatefulSet the app\'s replicas share, persistent and never evicting', async t => {
  const { object: redis } = statefulSets.find(s => s.name === RUN_STORE) ?? {}
  if (redis === undefined) throw new Error(`no StatefulSet ${RUN_STORE}`)
  t.equal(redis.spec?.replicas, 1, 'one primary (a replica with failover: Sentinel or a managed service, docs/runs.md)')
  t.equal(redis.spec?.serviceName, RUN_STORE, 'governed by its headless Service')
  const container = podSpecOf(redis).containers[0] as IContainer
  const args = container.args ?? []
  t.equal(args[0], 'redis-server')
  const options = new Map<string, string>()
  for (let i = 1; i < args.length; i += 2) options.set(args[i] as string, args[i + 1] as string)
  t.equal(options.get('--appendonly'), 'yes', 'AOF on: a restart loses nothing written before it')
  t.equal(options.get('--appendfsync'), 'everysec', 'a crash loses at most the last second')
  t.equal(options.get('--maxmemory-policy'), 'noeviction', 'a full Redis refuses writes (503) rather than dropping runs')
  t.ok(quantity(options.get('--maxmemory')?.replace(/mb$/, 'M')) < quantity(container.resources?.limits?.memory),
    `maxmemory ${options.get('--maxmemory')} below the memory limit ${container.resources?.limits?.memory}: refused writes, not an OOM kill`)
  const data = container.volumeMounts?.find(v => v.mountPath === options.get('--dir'))
  t.ok(data !== undefined && redis.spec?.volumeClaimTemplates?.some(c => c.metadata?.name === data.name),
    `--dir ${options.get('--dir')} is on a volume claimed per pod`)

  const service = manifests.find(m => m.kind === 'Service' && m.name === RUN_STORE)?.data as unknown as Service
  t.equal(service.spec?.clusterIP, 'None', 'a headless Service')
  t.ok(matchesLabels(service.spec?.selector, redis.spec?.template.metadata?.labels), 'it selects the Redis pod')
  t.same(service.spec?.ports?.map(p => resolvePort(p.targetPort, container)), [6379], 'one port, to Redis')

  const { deployment: app, container: sidecar } = findContainer('sidecar')
  const policy = manifests.find(m => m.kind === 'NetworkPolicy' && m.name === RUN_STORE)?.data as unknown as NetworkPolicy
  t.ok(matchesLabels(policy.spec?.podSelector?.matchLabels, redis.spec?.template.metadata?.labels), 'a NetworkPolicy selects the Redis pod')
  const rules = policy.spec?.ingress ?? []
  t.equal(rules.length, 1)
  t.ok(rules[0]?.from?.length === 1 && matchesLabels(rules[0].from[0]?.podSelector?.matchLabels, app.spec?.template.metadata?.labels),
    'only the app\'s pods (their sidecars) are admitted')
  t.same(rules[0]?.ports?.map(p => p.port), [6379])

  const config = loadSidecarConfig(literalEnv(sidecar))
  t.equal(config.runStoreUrl?.text, `redis://${RUN_STORE}:6379`, 'the sidecar\'s RUN_STORE_URL is this Redis')
  t.ok(config.projectId !== undefined && config.appName !== undefined, 'PROJECT_ID and APP_NAME scope its keys')
  t.ok((app.spec?.replicas ?? 1) >= 2, `the ${app.spec?.replicas} replicas share runs`)
})

t.test('the KEDA example scales the app on the run store\'s backlog through Prometheus', async t => {
  const example = examples.find(e => e.kind === 'ScaledObject')
  if (example === undefined) throw new Error('no ScaledObject example')
  const spec = example.data.spec as {
    scaleTargetRef?: { name?: string }, minReplicaCount?: number, maxReplicaCount?: number,
    triggers?: Array<{ type?: string, metadata?: Record<string, string> }>
  }
  t.equal(example.data.apiVersion, 'keda.sh/v1alpha1')
  t.match(example.data.metadata, { annotations: { 'app-sidecar.dev/example': /placeholder/ } }, 'marked as an example')
  const { deployment: app } = findContainer('sidecar')
  t.equal(spec.scaleTargetRef?.name, app.metadata?.name, 'it scales the app\'s Deployment')
  t.ok((spec.minReplicaCount ?? 0) >= 1 && (spec.minReplicaCount ?? 0) <= (spec.maxReplicaCount ?? 0), 'min ≤ max replicas, at least one')
  t.equal(spec.triggers?.length, 1)
  const trigger = spec.triggers?.[0]
  t.equal(trigger?.type, 'prometheus')
  const query = trigger?.metadata?.query ?? ''
  t.match(query, /max\(sidecar_async_queued_runs\{/, 'the backlog, as any one replica reports it (every replica reports the app-wide figure)')
  const metricsSource = readFileSync(join(ROOT, 'src/metrics/metrics.ts'), 'utf8')
  for (const [name] of query.matchAll(/sidecar_[a-z_]+/g)) t.ok(metricsSource.includes(`name: '${name}'`), `${name} is a sidecar metric`)
  t.ok(Number(trigger?.metadata?.threshold) > 0, `threshold ${trigger?.metadata?.threshold}`)
  t.match(trigger?.metadata?.serverAddress, /^https?:\/\//)
})

t.test('the Dockerfile: Node 24 LTS, two images each with its own dependencies, numeric users, the store\'s data folder', async t => {
  t.same(stages.map(s => [s.name, s.from]), [['build', 'node:24-bookworm-slim'], ['build-store', 'node:24-bookworm-slim'], ['sidecar', 'node:24-bookworm-slim']],
    'a build stage, then the build store\'s image and the sidecar\'s (the default target), all on node:24-bookworm-slim')
  t.ok(buildStage !== undefined && last(buildStage, 'WORKDIR') === '/src', 'the build stage compiles in /src')
  t.ok(buildStage?.instructions.some(i => i.op === 'COPY' && i.args === 'src ./src') === true, 'the build stage has the sources')
  const builds = buildStage?.instructions.filter(i => i.op === 'RUN').map(i => i.args).join(' ') ?? ''
  t.match(builds, /npm run build && npm run build --prefix packages\/build-store/, 'the build stage compiles both packages')
  t.match(builds, /rm -rf dist\/build-store dist\/bin\/build-store\.\* dist\/demo\/start\.\*/, 'the sidecar\'s output leaves out the build store')

  const images = [
    { stage: runtime, manifests: 'package.json package-lock.json', dist: '/src/dist', bin: '/app/dist/bin/app-sidecar.js' },
    { stage: storeStage, manifests: 'packages/build-store/package.json packages/build-store/package-lock.json', dist: '/src/packages/build-store/dist', bin: '/app/dist/bin/build-store.js' }
  ]
  for (const { stage, manifests, dist, bin } of images) {
    if (stage === undefined) throw new Error('the Dockerfile has no build-store stage')
    const at = stage.name ?? ''
    t.match(last(stage, 'USER'), /^[1-9][0-9]*:[0-9]+$/, `${at}: USER is numeric uid:gid, not a name`)
    t.equal(last(stage, 'WORKDIR'), '/app', `${at}: WORKDIR /app`)
    t.ok(stage.instructions.some(i => i.op === 'COPY' && i.args === `${manifests} ./`), `${at}: installs from ${manifests}`)
    t.match(stage.instructions.filter(i => i.op === 'RUN').map(i => i.args).join(' '), /npm ci --omit=dev --ignore-scripts/, `${at}: production dependencies only, from the lockfile`)
    t.ok(stage.instructions.some(i => i.op === 'COPY' && i.args === `--from=build ${dist} ./dist`), `${at}: the compiled output from the build stage`)
    t.same(execForm(last(stage, 'ENTRYPOINT')), ['node'], `${at}: ENTRYPOINT node`)
    t.same(execForm(last(stage, 'CMD')), [bin], `${at}: runs ${bin} by default`)
  }
  const store = storeStage as Stage
  t.match(last(store, 'ENV'), /(^|\s)DATA_DIR=\/app\/data(\s|$)/, 'the build store: DATA_DIR=/app/data')
  const uid = (last(store, 'USER') ?? '').split(':')[0]
  const run = store.instructions.filter(i => i.op === 'RUN').map(i => i.args).join(' ')
  t.match(run, /mkdir -p \/app\/data/, 'the data folder exists')
  t.match(run, new RegExp(`chown ${uid}(:[0-9]+)? /app/data`), 'the data folder belongs to the runtime user')

  const bins = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string> }).bin
  t.same(Object.keys(bins).sort(), ['app-sidecar', 'build-store'], 'package.json names both bins')
  const storeBins = (JSON.parse(readFileSync(join(ROOT, 'packages/build-store/package.json'), 'utf8')) as { bin: Record<string, string> }).bin
  t.same(storeBins, { 'build-store': bins['build-store'] }, 'the build store\'s package names its bin at the same path')
  for (const [name, path] of Object.entries(bins)) {
    const source = sourceOfImagePath(`/app/${path}`)
    t.ok(source !== undefined && existsSync(source), `bin ${name} (/app/${path}) is built into its image`)
  }
  const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n').map(l => l.trim())
  for (const needed of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'src', 'packages', 'packages/build-store']) {
    t.notOk(ignored.includes(needed), `.dockerignore keeps ${needed} in the build context`)
  }
})

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' })
t.test('kubectl kustomize renders the base as listed', { skip: kubectl.status === 0 ? false : 'kubectl is not installed' }, async t => {
  const rendered = spawnSync('kubectl', ['kustomize', DEPLOY], { encoding: 'utf8' })
  t.equal(rendered.status, 0, rendered.stderr)
  const objects = parseAllDocuments(rendered.stdout).map(d => d.toJS() as { kind: string, metadata: { name: string, namespace?: string } })
  t.same(objects.map(o => `${o.kind}/${o.metadata.name}`).sort(), manifests.map(m => `${m.kind}/${m.name}`).sort(), 'every listed object, nothing else')
  for (const o of objects) if (o.kind !== 'Namespace') t.equal(o.metadata.namespace, kustomization.namespace, `${o.kind}/${o.metadata.name} namespaced`)
  const tagged = [IMAGE_NAME, STORE_IMAGE_NAME].map(name => kustomization.images?.find(i => i.name === name))
  const redisImage = podSpecOf(statefulSets[0]?.object as StatefulSet).containers[0]?.image
  const images = new Set(rendered.stdout.match(/image: \S+/g)?.filter(i => i !== `image: ${redisImage}`))
  t.same([...images].sort(), tagged.map(image => `image: ${image?.newName}:${image?.newTag}`).sort(), 'every container but the run store\'s Redis runs one of the two tagged images')
})
