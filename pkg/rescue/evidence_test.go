package rescue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
)

// s16 is S16, a control plane that one node still reaches: node-0 (the
// control-plane node, tainted for it) keeps renewing its Lease; the
// kubelets of node-1..5 lost the API at t0 (NotReady, Unknown; kube-
// controller-manager's unreachable:NoSchedule taint on each; no NoExecute
// taint: a zone of 6 with 5 down is in PartialDisruption, whose rate is 0
// at this size), while node-0's agent still sees each of them alive on the
// gossip plane (CutOffFromAPI). Each worker runs one critical Deployment's
// only pod, coredns-like: it tolerates node-0's control-plane taint.
// mutate picks the policy (the default 30 s one when none).
func s16(now time.Time, mutate ...func(*v1alpha1.RecoveryPolicy)) *world {
	w := newWorld(now)
	cp := corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	w.node("node-0", "z1", corev1.ConditionTrue, t0.Add(-time.Hour), cp)
	w.s.Verdicts = map[string]liveness.NodeVerdict{"node-0": {Verdict: liveness.Alive, Since: t0.Add(-time.Hour),
		LeaseRenewSeen: now.Add(-2 * time.Second), LeaseStaleAt: now.Add(10 * time.Second), Reason: "Ready"}}
	for i := 1; i <= 5; i++ {
		name := fmt.Sprintf("node-%d", i)
		w.node(name, "z1", corev1.ConditionUnknown, t0)
		w.s.Verdicts[name] = liveness.NodeVerdict{Verdict: liveness.CutOffFromAPI, Since: t0,
			LeaseRenewSeen: t0.Add(-30 * time.Second), LeaseStale: true, LeaseStaleAt: t0.Add(-18 * time.Second),
			Reason: "node-0 reads it Alive on the gossip plane, first-hand, after its NotReady transition"}
		p := w.deploymentPod(fmt.Sprintf("dns-%d", i), name, 1, 0)
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: cp.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	w.policy("default", mutate...)
	return w
}

// twoPlanesZero is S13's TwoPlanes policy with maxUnavailableTime 0 s.
func twoPlanesZero(p *v1alpha1.RecoveryPolicy) {
	p.Spec.Detection = v1alpha1.DetectionTwoPlanes
	p.Spec.MaxUnavailableTime = &metav1.Duration{}
}

// node4 gives node-4 another verdict: Dead (really dead: its gossip
// watchers say so) or Unknown (no witness either way).
func node4(v liveness.Verdict) func(*world) {
	return func(w *world) {
		nv := w.s.Verdicts["node-4"]
		nv.Verdict, nv.Reason = v, "no witness sees it alive"
		w.s.Verdicts["node-4"] = nv
	}
}

// TestEvidenceOfLifeHolds: a node that a witness reaching the API sees
// alive is not stranded, whatever its Lease and Ready flag say; a node
// nobody sees alive is rescued after the policy, as before.
func TestEvidenceOfLifeHolds(t *testing.T) {
	held := map[string]Decision{}
	for i := 1; i <= 5; i++ {
		held[fmt.Sprintf("dns-%d-5d4f-x1", i)] = DecisionHeld
	}
	with := func(d map[string]Decision, pod string, dec Decision) map[string]Decision {
		out := map[string]Decision{}
		for k, v := range d {
			out[k] = v
		}
		out[pod] = dec
		return out
	}
	const dns4 = "dns-4-5d4f-x1"
	mk := func(now time.Time, policy func(*v1alpha1.RecoveryPolicy), mutate ...func(*world)) func() *world {
		return func() *world {
			var w *world
			if policy == nil {
				w = s16(now)
			} else {
				w = s16(now, policy)
			}
			for _, m := range mutate {
				m(w)
			}
			return w
		}
	}
	tests := []planCase{
		{
			name:      "S16, default policy, 5 min in: every worker seen alive, nothing deleted",
			world:     mk(at(5*time.Minute), nil),
			decisions: held,
			reasons:   map[string]string{"dns-1-5d4f-x1": "a witness that reaches the API sees it alive (cut off from the API, not dead: node-0 reads it Alive on the gossip plane"},
			nextCheck: at(5*time.Minute + evidenceRecheck),
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.Stranded != 0 || r.Held != 5 || !strings.Contains(r.Blocked, "not stranded") {
					t.Errorf("policy report %+v: want 5 held, none stranded, Blocked naming why", r)
				}
			},
		},
		{
			name:      "S16, TwoPlanes 0 s policy: nothing deleted",
			world:     mk(at(time.Minute), twoPlanesZero),
			decisions: held,
			nextCheck: at(time.Minute + evidenceRecheck),
		},
		{
			name:      "S16 with node-4 really dead (its watchers say Dead): its pod is rescued after the policy, the others hold",
			world:     mk(at(time.Minute), nil, node4(liveness.Dead)),
			decisions: with(held, dns4, DecisionAct),
			actions:   []string{"Delete kube-system/" + dns4},
			nextCheck: at(time.Minute + evidenceRecheck),
			check: func(t *testing.T, p Plan) {
				if !strings.Contains(p.Actions[0].Reason, "Ready node node-0 admits the replacement") {
					t.Errorf("reason %q: want node-0 as the target", p.Actions[0].Reason)
				}
			},
		},
		{
			name:      "S16 with node-4 really dead, TwoPlanes 0 s: rescued, the others hold",
			world:     mk(at(time.Minute), twoPlanesZero, node4(liveness.Dead)),
			decisions: with(held, dns4, DecisionAct),
			actions:   []string{"Delete kube-system/" + dns4},
			nextCheck: at(time.Minute + evidenceRecheck),
		},
		{
			name:      "S16 with node-4 Unknown (no witness either way): rescued after the policy, the others hold",
			world:     mk(at(time.Minute), nil, node4(liveness.Unknown)),
			decisions: with(held, dns4, DecisionAct),
			actions:   []string{"Delete kube-system/" + dns4},
			nextCheck: at(time.Minute + evidenceRecheck),
		},
		{
			name:      "S16 with node-4 really dead, before its deadline: not yet",
			world:     mk(at(20*time.Second), nil, node4(liveness.Dead)),
			decisions: map[string]Decision{"dns-1-5d4f-x1": DecisionNotYet, "dns-2-5d4f-x1": DecisionNotYet, "dns-3-5d4f-x1": DecisionNotYet, dns4: DecisionNotYet, "dns-5-5d4f-x1": DecisionNotYet},
			nextCheck: at(30 * time.Second),
		},
		{
			// Without agents one renewing node and the rest stale is also
			// what a mass death looks like: rebound acts after the policy,
			// within what the Ready nodes can run, as before.
			name: "the S16 shape without agents (every worker Unknown): rescued after the policy",
			world: mk(at(time.Minute), nil, func(w *world) {
				for i := 1; i <= 5; i++ {
					n := fmt.Sprintf("node-%d", i)
					v := w.s.Verdicts[n]
					v.Verdict = liveness.Unknown
					w.s.Verdicts[n] = v
				}
			}),
			decisions: map[string]Decision{"dns-1-5d4f-x1": DecisionAct, "dns-2-5d4f-x1": DecisionAct, "dns-3-5d4f-x1": DecisionAct, dns4: DecisionAct, "dns-5-5d4f-x1": DecisionAct},
			actions: []string{"Delete kube-system/dns-1-5d4f-x1", "Delete kube-system/dns-2-5d4f-x1", "Delete kube-system/dns-3-5d4f-x1",
				"Delete kube-system/" + dns4, "Delete kube-system/dns-5-5d4f-x1"},
		},
		{
			name: "the evidence ages out (the verdict turns Unknown): the held pod is rescued on the next plan",
			world: mk(at(5*time.Minute+evidenceRecheck), nil, func(w *world) {
				v := w.s.Verdicts["node-2"]
				v.Verdict = liveness.Unknown
				w.s.Verdicts["node-2"] = v
			}),
			decisions: with(held, "dns-2-5d4f-x1", DecisionAct),
			actions:   []string{"Delete kube-system/dns-2-5d4f-x1"},
			nextCheck: at(5*time.Minute + 2*evidenceRecheck),
		},
	}
	runPlanCases(t, tests)
}
