package rescue

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/liveness"
)

// TestAttackLingeringSessionIsNoLife: S16 with node-4 really dead, and
// node-0, the one observer that reaches the API, still lists its BGP
// session with node-4 Established since before the death: BIRD without
// BFD ends a dead peer's session only at its hold time (240 s by default,
// Calico's too). liveness says so: Unknown, with a Veto ("not dead while
// a live observer has a session with it"), and no first-hand life
// (firstHandLife refuses a session older than the NotReady transition
// within the hold time). Before the change rescue held only a
// CutOffFromAPI node and rescued node-4's pod after the policy; now the
// Veto rule counts as evidence of life and node-4's pod is Held until the
// hold time runs out: S16's dead worker is not rescued after the policy.
func TestAttackLingeringSessionIsNoLife(t *testing.T) {
	const dns4 = "dns-4-5d4f-x1"
	lingering := func(w *world) {
		nv := w.s.Verdicts["node-4"]
		nv.Verdict = liveness.Unknown
		nv.Veto = "node-0 reports its session with it Established (BFD none)"
		nv.Reason = fmt.Sprintf("NotReady since %s (rebound's own observation); not dead while a live observer has a session with it: %s", t0.Format(time.RFC3339), nv.Veto)
		w.s.Verdicts["node-4"] = nv
	}
	decisions := map[string]Decision{dns4: DecisionAct}
	for i := 1; i <= 5; i++ {
		if i != 4 {
			decisions[fmt.Sprintf("dns-%d-5d4f-x1", i)] = DecisionHeld
		}
	}
	runPlanCases(t, []planCase{
		{
			name: "S16, node-4 dead, node-0's pre-death session with it lingering (Veto, no first-hand life): rescued after the policy",
			world: func() *world {
				w := s16(at(time.Minute))
				lingering(w)
				return w
			},
			decisions: decisions,
			actions:   []string{"Delete kube-system/" + dns4},
			nextCheck: at(time.Minute + evidenceRecheck),
		},
	})
}

// TestAttackRestartForgetsRenewingLease: node-3's kubelet reports NotReady
// itself (a hung container runtime) for five minutes while it renews its
// Lease every 10 s; its pods are held on that evidence of life (its Lease
// seen renewing). The controller restarts: its first sight of node-3's
// Lease, 2 s ago, is no renewal watched, so node-3 has no evidence of
// life until the next renewal, up to a renew interval later. Tried: with
// a 0 s policy, would its pod be deleted in that window? It holds: the
// planner's clock for a node whose Lease is not stale on rebound's clock
// starts only when it goes stale, and a first sight goes stale only a
// renew interval plus the margin after it, by when the next renewal has
// been seen. The verdicts are liveness.Assess's own. Guard: holds on main.
func TestAttackRestartForgetsRenewingLease(t *testing.T) {
	const pod = "coredns-5d4f-x1"
	now := at(5 * time.Minute)
	for _, tc := range []struct {
		name  string
		lease liveness.Lease
		seen  time.Time // rebound's first sight of node-3 NotReady
	}{
		{name: "control: its Lease seen renewing 2 s ago: not stranded", seen: t0, lease: liveness.Lease{RenewSeen: now.Add(-2 * time.Second), RenewInterval: 10 * time.Second}},
		{name: "restarted controller, its first sight of the Lease 2 s ago: not stranded either", seen: now.Add(-2 * time.Second), lease: liveness.Lease{RenewSeen: now.Add(-2 * time.Second), RenewInterval: 10 * time.Second, FirstSight: true}},
	} {
		runPlanCases(t, []planCase{{
			name: tc.name,
			world: func() *world {
				w := newWorld(now)
				in := liveness.Input{Leases: map[string]liveness.Lease{}, FirstSeen: map[string]time.Time{}}
				for i, n := range []string{"node-0", "node-1", "node-2", "node-3", "node-4"} {
					if i == 3 {
						w.node(n, "z1", corev1.ConditionFalse, t0)
						in.Nodes = append(in.Nodes, liveness.Node{Name: n, Transition: t0})
						in.Leases[n] = tc.lease
						in.FirstSeen[n] = tc.seen
						continue
					}
					w.node(n, "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
					in.Nodes = append(in.Nodes, liveness.Node{Name: n, Ready: true, Transition: t0.Add(-time.Hour)})
					in.Leases[n] = liveness.Lease{RenewSeen: now.Add(-time.Second), RenewInterval: 10 * time.Second}
					in.FirstSeen[n] = t0.Add(-time.Hour)
				}
				w.s.Verdicts = liveness.Assess(in, now).Nodes
				w.deploymentPod("coredns", "node-3", 1, 0)
				w.policy("default", zeroSeconds)
				return w
			},
			decisions: map[string]Decision{pod: DecisionNotYet},
			reasons:   map[string]string{pod: "the clock starts when the Lease goes stale"},
			nextCheck: now.Add(10 * time.Second),
		}})
	}
}
