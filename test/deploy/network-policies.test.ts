// The NetworkPolicies of deploy/: callers reach each workload's public port alone.
import t from 'tap'
import type { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1'
import type { Service } from 'kubernetes-models/v1'
import { containerWithPort, deployments, deploymentSelectedBy, manifests, matchesLabels } from '../helpers/deploy-manifests.ts'

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

