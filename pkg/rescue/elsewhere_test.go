package rescue

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/liveness"
)

// TestNoReplacementOntoAnotherDownNode: the nodes of one outage go
// NotReady, and get upstream's NoSchedule taint, one after another (a
// monitor period apart, slower on a loaded control plane), and a node
// whose kubelet just lost the API stays Ready until its grace runs out.
// A delete in that gap let the scheduler (which has no Ready filter) bind
// the replacement to another node of the outage, where it sat as the pod
// did: S16's dead worker, rescued onto a worker cut off from the API,
// never ran again while the cut lasted. Every row but the last fails
// with the source node's gate alone.
func TestNoReplacementOntoAnotherDownNode(t *testing.T) {
	// node-3 NotReady and tainted; node-4 the other node of the outage.
	mk := func(mutate func(w *world)) func() *world {
		return func() *world {
			w := s3Zero(at(time.Second))
			taint(corev1.TaintNodeUnreachable)(w)
			mutate(w)
			return w
		}
	}
	notReadyUntainted := func(w *world) {
		withoutNoSchedule(w.s.Nodes[4])
		w.s.Nodes[4].Status.Conditions[0].Status = corev1.ConditionUnknown
		w.s.Nodes[4].Status.Conditions[0].LastTransitionTime = w.s.Nodes[3].Status.Conditions[0].LastTransitionTime
	}
	tests := []planCase{
		{
			name:      "node-4 NotReady a moment after node-3, its NoSchedule taint not there yet: not yet",
			world:     mk(notReadyUntainted),
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "waiting for node node-4 to be tainted node.kubernetes.io/unreachable:NoSchedule, or to be able to run pods again: it cannot run the replacement (NotReady)"},
			nextCheck: at(time.Second + noTargetRecheck),
		},
		{
			name:      "node-4 Ready, its Lease stale on rebound's clock (its grace not out yet): not yet",
			world:     mk(node4LeaseStale),
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "waiting for node node-4 to be tainted node.kubernetes.io/unreachable:NoSchedule, or to be able to run pods again: it cannot run the replacement (Ready, but its Lease not seen renewing)"},
			nextCheck: at(time.Second + noTargetRecheck),
		},
		{
			name: "node-4 dead on both planes, Ready, not marked yet: not yet (rebound's mark bars it)",
			world: mk(func(w *world) {
				w.s.Verdicts = map[string]liveness.NodeVerdict{"node-4": {Verdict: liveness.Dead, Early: true, DetectedAt: t0}}
			}),
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "waiting for node node-4 to be tainted rebound.dev/unreachable:NoSchedule, or to be able to run pods again: it cannot run the replacement (dead on both planes)"},
			nextCheck: at(time.Second + noTargetRecheck),
		},
		{
			name: "node-4's taint arrives: deleted, the replacement to node-0",
			world: mk(func(w *world) {
				notReadyUntainted(w)
				w.s.Nodes[4].Spec.Taints = append(w.s.Nodes[4].Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule})
			}),
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "Ready node node-0 admits the replacement"},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "node-4 cordoned: deleted",
			world: mk(func(w *world) {
				notReadyUntainted(w)
				w.s.Nodes[4].Spec.Unschedulable = true
			}),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "the pod's required node affinity excludes node-4: deleted",
			world: mk(func(w *world) {
				notReadyUntainted(w)
				for i, n := range w.s.Nodes {
					if i != 4 {
						n.Labels["pool"] = "system"
					}
				}
				w.s.Pods[0].Spec.NodeSelector = map[string]string{"pool": "system"}
			}),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "the pod tolerates node-4's taint to come (and every other): the source's once per incident decides, deleted",
			world: mk(func(w *world) {
				notReadyUntainted(w)
				tolerateAll(w)
			}),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name:      "no other node down: deleted (holds with the source's gate alone too)",
			world:     mk(func(*world) {}),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
	}
	runPlanCases(t, tests)
}

// node4LeaseStale gives s3Zero's nodes Lease verdicts: node-3's (NotReady)
// and node-4's stale since before t0, every other renewing.
func node4LeaseStale(w *world) {
	w.s.Verdicts = map[string]liveness.NodeVerdict{}
	for i, n := range w.s.Nodes {
		v := liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: at(0), LeaseStaleAt: at(2 * time.Second)}
		if i == 4 {
			v.LeaseRenewSeen, v.LeaseStaleAt, v.LeaseStale = t0.Add(-10*time.Second), t0.Add(-6*time.Second), true
		}
		if i == 3 {
			v = liveness.NodeVerdict{Verdict: liveness.Unknown, Since: t0, LeaseStale: true, LeaseRenewSeen: t0.Add(-10 * time.Second), LeaseStaleAt: t0.Add(-6 * time.Second)}
		}
		w.s.Verdicts[n.Name] = v
	}
}
