// The NetworkPolicies of deploy/: callers reach each workload's public port alone, and the build
// store (whose port also serves the admin write routes) admits only the pods that run the sidecar.
import t from 'tap'
import type { Deployment, StatefulSet } from 'kubernetes-models/apps/v1'
import type { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1'
import type { Service } from 'kubernetes-models/v1'
import { loadSidecarConfig } from '../../src/config/sidecar-config.ts'
import { loadStoreConfig } from '../../src/build-store/store-config.ts'
import {
  containerWithPort, deployments, deploymentSelectedBy, findContainer, literalEnv, manifests, matchesLabels, podSpecOf, statefulSets
} from '../helpers/deploy-manifests.ts'

/** The label a pod template carries when the pod runs the sidecar (deploy/hello-app-deployment.yaml). */
const SIDECAR_POD_LABEL = { 'app-sidecar.dev/sidecar': 'true' }
const STORE_PORT = 7070

const policies = manifests.filter(m => m.kind === 'NetworkPolicy').map(m => m.data as unknown as NetworkPolicy)
const policiesSelecting = (labels: Record<string, string> | undefined): NetworkPolicy[] =>
  policies.filter(p => matchesLabels(p.spec?.podSelector?.matchLabels, labels))

t.test('NetworkPolicies admit callers to the public port alone', async t => {
  for (const { name, object } of deployments) {
    const labels = object.spec?.template.metadata?.labels
    const selecting = policiesSelecting(labels)
    t.equal(selecting.length, 1, `${name}: one NetworkPolicy selects its pods`)
    const policy = selecting[0]
    t.ok(policy?.spec?.policyTypes?.includes('Ingress'), `${name}: the policy governs ingress`)
    // The public port is the one its Service exposes (pinned to sidecar:8000 and store:7070 above).
    const service = manifests.filter(m => m.kind === 'Service').map(m => m.data as unknown as Service)
      .find(s => deploymentSelectedBy(s.spec?.selector) === object)
    const publicPort = containerWithPort(object, service?.spec?.ports?.[0]?.targetPort)?.port
    t.ok(publicPort !== undefined, `${name}: a Service names its public port`)
    const rules = policy?.spec?.ingress ?? []
    t.ok(rules.length > 0, `${name}: at least one ingress rule`)
    for (const rule of rules) {
      const ports = (rule.ports ?? []).map(p => containerWithPort(object, p.port)?.port)
      t.same(ports, [publicPort], `${name}: a rule admits port ${publicPort} only (a rule without ports would admit all)`)
    }
  }
})

t.test('the build store admits the sidecars alone (by pod label), on 7070 alone', async t => {
  const { deployment: store, container } = findContainer('build-store')
  const storePort = loadStoreConfig(literalEnv(container)).port
  t.equal(storePort, STORE_PORT, 'the store listens on 7070')
  const selecting = policiesSelecting(store.spec?.template.metadata?.labels)
  t.equal(selecting.length, 1, 'one NetworkPolicy selects the store\'s pods')
  const policy = selecting[0]
  t.same(policy?.spec?.policyTypes, ['Ingress'], 'it governs ingress')
  const rules = policy?.spec?.ingress ?? []
  t.equal(rules.length, 1, 'one ingress rule (each rule admits on its own)')
  const rule = rules[0]
  t.same(rule?.ports, [{ protocol: 'TCP', port: STORE_PORT }], 'the rule admits TCP 7070 alone')
  // a rule without `from` admits every pod, and an empty podSelector every pod of the namespace
  t.same(rule?.from, [{ podSelector: { matchLabels: SIDECAR_POD_LABEL } }],
    'from pods labelled app-sidecar.dev/sidecar=true, and nothing else (no ipBlock, no namespaceSelector, no expressions)')

  // the label is on exactly the pods that run a sidecar: each of them reaches the store, no other pod does
  const workloads: Array<{ name: string, object: Deployment | StatefulSet }> = [...deployments, ...statefulSets]
  const withSidecar = workloads.filter(w => podSpecOf(w.object).containers.some(c => c.name === 'sidecar'))
  t.ok(withSidecar.length >= 1, 'at least one workload runs the sidecar')
  for (const { name, object } of workloads) {
    const runsSidecar = withSidecar.some(w => w.object === object)
    const admitted = matchesLabels(rule?.from?.[0]?.podSelector?.matchLabels, object.spec?.template.metadata?.labels)
    t.equal(admitted, runsSidecar, `${name}: ${runsSidecar ? 'runs the sidecar, admitted' : 'runs no sidecar, not admitted'}`)
  }
  for (const { name, object } of withSidecar) {
    const sidecar = podSpecOf(object).containers.find(c => c.name === 'sidecar')
    if (sidecar === undefined) continue
    const storeUrl = loadSidecarConfig(literalEnv(sidecar)).storeUrl
    const service = manifests.filter(m => m.kind === 'Service').map(m => m.data as unknown as Service)
      .find(s => s.metadata?.name === storeUrl.hostname)
    t.ok(service !== undefined && deploymentSelectedBy(service.spec?.selector) === store, `${name}: STORE_URL names the store's Service`)
    const servicePort = service?.spec?.ports?.find(p => p.port === Number(storeUrl.port))
    t.equal(containerWithPort(store, servicePort?.targetPort)?.port, STORE_PORT, `${name}: STORE_URL's port leads to the store's 7070`)
  }
})
