// The manifests of deploy/ as the Kustomize base lists them, and the lookups the deploy tests share
// (test/deploy/): which pods a selector picks, which container declares a port.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseAllDocuments } from 'yaml'
import type { Deployment, StatefulSet } from 'kubernetes-models/apps/v1'
import type { IContainer, IPodSpec, IProbe } from 'kubernetes-models/v1'

export const ROOT = fileURLToPath(new URL('../../', import.meta.url))
export const DEPLOY = join(ROOT, 'deploy')
export const EXAMPLE_SUFFIX = '.example.yaml'
/** The name manifests give the sidecar's image; kustomization.yaml's `images:` points it at a registry. */
export const IMAGE_NAME = 'app-sidecar'
/** The build store's image (the Dockerfile's `build-store` target). */
export const STORE_IMAGE_NAME = 'app-sidecar-build-store'
/** The run store's StatefulSet, Service and NetworkPolicy (deploy/run-store-redis/). */
export const RUN_STORE = 'run-store-redis'

export interface Manifest { file: string, kind: string, name: string, data: Record<string, unknown> }

export function parseYamlFile (path: string): Array<Record<string, unknown>> {
  return parseAllDocuments(readFileSync(path, 'utf8')).map(doc => {
    if (doc.errors.length > 0) throw new Error(`${path}: ${doc.errors.map(e => e.message).join('; ')}`)
    return doc.toJS() as Record<string, unknown>
  }).filter(doc => doc !== null)
}

function toManifests (file: string): Manifest[] {
  return parseYamlFile(join(DEPLOY, file)).map(data => {
    const metadata = data.metadata as { name?: string } | undefined
    return { file, kind: String(data.kind), name: String(metadata?.name), data }
  })
}

export const kustomization = parseYamlFile(join(DEPLOY, 'kustomization.yaml'))[0] as {
  namespace?: string, resources?: string[], components?: string[], images?: Array<{ name: string, newName?: string, newTag?: string }>
}
const yamlIn = (dir: string): string[] => readdirSync(join(DEPLOY, dir)).filter(f => /\.ya?ml$/.test(f) && f !== 'kustomization.yaml').sort()
/** Each component's folder, its kustomization and its manifests' paths (relative to deploy/). */
export const components = (kustomization.components ?? []).map(dir => {
  const own = parseYamlFile(join(DEPLOY, dir, 'kustomization.yaml'))[0] as { apiVersion?: string, kind?: string, resources?: string[] }
  return { dir, own, files: yamlIn(dir), listed: (own.resources ?? []).map(f => join(dir, f)) }
})
export const listed = [...kustomization.resources ?? [], ...components.flatMap(c => c.listed)]
export const yamlFiles = yamlIn('.')
export const exampleFiles = yamlFiles.filter(f => f.endsWith(EXAMPLE_SUFFIX))
export const manifests = listed.filter(f => existsSync(join(DEPLOY, f))).flatMap(toManifests)
export const examples = exampleFiles.flatMap(toManifests)
export const deployments = manifests.filter(m => m.kind === 'Deployment').map(m => ({ ...m, object: m.data as unknown as Deployment }))
/** The run store's Redis (deploy/run-store-redis/): a StatefulSet of another image, checked on its own. */
export const statefulSets = manifests.filter(m => m.kind === 'StatefulSet').map(m => ({ ...m, object: m.data as unknown as StatefulSet }))

export function podSpecOf (d: Deployment | StatefulSet): IPodSpec {
  const spec = d.spec?.template.spec
  if (spec === undefined) throw new Error(`Deployment ${d.metadata?.name} has no pod template spec`)
  return spec
}

export function containersOf (spec: IPodSpec): IContainer[] {
  return [...(spec.initContainers ?? []), ...spec.containers]
}

export function findContainer (name: string): { deployment: Deployment, pod: IPodSpec, container: IContainer } {
  for (const { object } of deployments) {
    const pod = podSpecOf(object)
    const container = pod.containers.find(c => c.name === name)
    if (container !== undefined) return { deployment: object, pod, container }
  }
  throw new Error(`no Deployment has a container named ${name}`)
}

/** A probe's or Service's port: a number, or a name looked up in the container's own ports (kubelet rules). */
export function resolvePort (port: number | string | undefined, container: IContainer): number | undefined {
  if (typeof port === 'number') return port
  return container.ports?.find(p => p.name === port)?.containerPort
}

export function httpProbe (probe: IProbe | undefined, container: IContainer): { path: string | undefined, port: number | undefined } {
  return { path: probe?.httpGet?.path, port: resolvePort(probe?.httpGet?.port, container) }
}

export function literalEnv (container: IContainer): Record<string, string> {
  const env: Record<string, string> = {}
  for (const e of container.env ?? []) if (e.value !== undefined) env[e.name] = e.value
  return env
}


export function matchesLabels (selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  if (selector === undefined || Object.keys(selector).length === 0) return false
  return Object.entries(selector).every(([k, v]) => labels?.[k] === v)
}

export function deploymentSelectedBy (selector: Record<string, string> | undefined): Deployment {
  const found = deployments.filter(d => matchesLabels(selector, d.object.spec?.template.metadata?.labels))
  if (found.length !== 1) throw new Error(`selector ${JSON.stringify(selector)} matches ${found.length} Deployments`)
  return (found[0] as { object: Deployment }).object
}

/** Maps a port number of a pod to the container that declares it. */
export function containerWithPort (d: Deployment, port: number | string | undefined): { container: IContainer, port: number } | undefined {
  for (const container of podSpecOf(d).containers) {
    const resolved = resolvePort(port, container)
    if (resolved !== undefined && container.ports?.some(p => p.containerPort === resolved) === true) return { container, port: resolved }
  }
  return undefined
}
