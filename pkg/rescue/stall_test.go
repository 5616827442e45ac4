package rescue

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
)

// The edges of a stall (S15): every kubelet loses the API, so every Lease
// goes stale on rebound's clock a renew interval after its last renewal,
// and kube-controller-manager flips the nodes NotReady one after another a
// node grace period later; then they come back one after another. Nothing
// may be deleted at the start, in the middle or at the end, whatever the
// policy's maxUnavailableTime; a node that really died in the stall is
// rescued after it.

// leaseRenew is the test Lease plane's renew interval plus margin.
const leaseStaleAfter = 4 * time.Second

// stallEnd is when node-0's kubelet reaches the API again in the tests.
var stallEnd = at(90 * time.Second)

// s15 is six nodes of one zone, node-0..5, each NotReady (Unknown) since
// t0 when notReady says so and Ready for an hour otherwise; the critical
// Deployment's pod on node-3; a policy with maxUnavailableTime 0s (S13's,
// the shortest a user can set). Every node's Lease was last seen renewing
// at renewSeen[node] (a node missing has no Lease plane).
func s15(now time.Time, notReady map[string]bool, renewSeen map[string]time.Time) *world {
	w := newWorld(now)
	w.s.Verdicts = map[string]liveness.NodeVerdict{}
	for i := range 6 {
		name := fmt.Sprintf("node-%d", i)
		status, since := corev1.ConditionTrue, t0.Add(-time.Hour)
		if notReady[name] {
			status, since = corev1.ConditionUnknown, t0
		}
		w.node(name, "z1", status, since)
		v := liveness.NodeVerdict{Verdict: liveness.Alive, Since: since}
		if notReady[name] {
			v.Verdict = liveness.Unknown
		}
		if seen, ok := renewSeen[name]; ok {
			v.LeaseRenewSeen, v.LeaseStaleAt = seen, seen.Add(leaseStaleAfter)
			v.LeaseStale = now.After(v.LeaseStaleAt)
		}
		w.s.Verdicts[name] = v
	}
	w.deploymentPod("coredns", "node-3", 1, 0)
	w.policy("default", func(p *v1alpha1.RecoveryPolicy) { p.Spec.MaxUnavailableTime = &metav1.Duration{} })
	return w
}

// nodes returns a set of node names.
func nodes(names ...string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// renewals maps each named node to one time.
func renewals(at time.Time, names ...string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range names {
		out[n] = at
	}
	return out
}

var allSix = []string{"node-0", "node-1", "node-2", "node-3", "node-4", "node-5"}

func TestStallEdges(t *testing.T) {
	lastRenewal := t0.Add(-40 * time.Second) // every kubelet's last renewal before the stall
	tests := []planCase{
		{
			name: "stall's start: 3 of 6 NotReady, the others still Ready in the API with stale Leases: held",
			world: func() *world {
				return s15(at(time.Second), nodes("node-1", "node-2", "node-3"), renewals(lastRenewal, allSix...))
			},
			decisions: map[string]Decision{coredns: DecisionHeld},
			reasons:   map[string]string{coredns: "no node's Lease renews on rebound's clock (6 of 6 stale)"},
			nextCheck: at(time.Second + noTargetRecheck),
			check: func(t *testing.T, p Plan) {
				if !p.Disruption.Active || !p.Disruption.LeaseStall {
					t.Errorf("disruption %+v, want a Lease stall", p.Disruption)
				}
			},
		},
		{
			name: "stall's start, a cache a few ms behind: one node still Ready in it, every Lease stale: held",
			world: func() *world {
				return s15(at(5*time.Second), nodes("node-0", "node-1", "node-2", "node-3", "node-4"), renewals(lastRenewal, allSix...))
			},
			decisions: map[string]Decision{coredns: DecisionHeld},
			nextCheck: at(5*time.Second + noTargetRecheck),
		},
		{
			name: "stall's end: node-3's Lease renewed 76 ms ago, its Ready flag not back yet: not stranded",
			world: func() *world {
				seen := renewals(lastRenewal, allSix...)
				seen["node-0"] = stallEnd.Add(-2 * time.Second)
				seen["node-3"] = stallEnd.Add(-76 * time.Millisecond)
				w := s15(stallEnd, nodes("node-1", "node-2", "node-3", "node-4", "node-5"), seen)
				node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(stallEnd.Add(-time.Second))
				w.s.PreviousDisruption = Disruption{EndedAt: stallEnd.Add(-2 * time.Second)}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNotYet},
			nextCheck: stallEnd.Add(-time.Second + 50*time.Second),
		},
		{
			name: "no stall: a NotReady node whose Lease renews (its kubelet reports NotReady itself) is not stranded",
			world: func() *world {
				seen := renewals(at(60*time.Second), allSix...)
				return s15(at(61*time.Second), nodes("node-3"), seen)
			},
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "its Lease renews on rebound's clock, last seen 2026-03-01T12:01:00Z"},
			nextCheck: at(64 * time.Second),
		},
		{
			name: "stall's end: node-3 not back yet, within the node grace period of the end: not yet",
			world: func() *world {
				seen := renewals(lastRenewal, allSix...)
				seen["node-0"] = stallEnd
				w := s15(stallEnd.Add(time.Second), nodes("node-1", "node-2", "node-3", "node-4", "node-5"), seen)
				node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(stallEnd)
				w.s.PreviousDisruption = Disruption{Active: true, LeaseStall: true}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "the node grace period 50s after a stall ended"},
			nextCheck: stallEnd.Add(time.Second + 50*time.Second),
		},
		{
			name: "stall's end unseen (restarted controller): node-0 back, node-3 not: judged a node grace period after node-0's return",
			world: func() *world {
				seen := renewals(stallEnd.Add(-3*time.Second), allSix...) // a new tracker's first sight
				seen["node-0"] = stallEnd
				w := s15(stallEnd.Add(10*time.Second), nodes("node-1", "node-2", "node-3", "node-4", "node-5"), seen)
				node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(stallEnd)
				return w
			},
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "the node grace period 50s after the first node Ready now returned"},
			nextCheck: stallEnd.Add(50 * time.Second),
		},
		{
			name: "a node that really died in the stall: rescued a node grace period after the end",
			world: func() *world {
				seen := renewals(lastRenewal, allSix...)
				for _, n := range []string{"node-0", "node-1", "node-2", "node-4", "node-5"} {
					seen[n] = stallEnd.Add(50 * time.Second)
				}
				w := s15(stallEnd.Add(51*time.Second), nodes("node-3"), seen)
				w.s.PreviousDisruption = Disruption{EndedAt: stallEnd}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "a Ready node whose Lease is stale is no target, and holds the delete while nothing keeps the replacement off it",
			world: func() *world {
				seen := renewals(lastRenewal, "node-0", "node-1", "node-2", "node-3", "node-4")
				seen["node-5"] = at(60 * time.Second)
				return s15(at(61*time.Second), nodes("node-1", "node-2", "node-3", "node-4"), seen)
			},
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "waiting for node node-0 to be tainted node.kubernetes.io/unreachable:NoSchedule, or to be able to run pods again: it cannot run the replacement (Ready, but its Lease not seen renewing)"},
			nextCheck: at(61*time.Second + noTargetRecheck),
		},
		{
			name: "a Ready node whose Lease is stale, cordoned, is no target; a fresh one is",
			world: func() *world {
				seen := renewals(lastRenewal, "node-0", "node-1", "node-2", "node-3", "node-4")
				seen["node-5"] = at(60 * time.Second)
				w := s15(at(61*time.Second), nodes("node-1", "node-2", "node-3", "node-4"), seen)
				w.s.Nodes[0].Spec.Unschedulable = true
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "Ready node node-5 admits the replacement"},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "the only Ready nodes have stale Leases, a NotReady one renews: no target, not a stall",
			world: func() *world {
				seen := renewals(lastRenewal, allSix...)
				seen["node-5"] = at(60 * time.Second)
				return s15(at(61*time.Second), nodes("node-1", "node-2", "node-3", "node-4", "node-5"), seen)
			},
			decisions: map[string]Decision{coredns: DecisionNoTarget},
			reasons:   map[string]string{coredns: "Ready in the API but its Lease stale on rebound's clock, or not yet seen renewing since rebound started: 1 node(s)"},
			nextCheck: at(61*time.Second + noTargetRecheck),
		},
		{
			name: "S1's shape on the Lease plane (node-0 renews, 1-5 dead): not a stall, rescued",
			world: func() *world {
				seen := renewals(lastRenewal, allSix...)
				seen["node-0"] = at(60 * time.Second)
				return s15(at(61*time.Second), nodes("node-1", "node-2", "node-3", "node-4", "node-5"), seen)
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "no Lease plane (a controller without --lease-plane): the Ready flags alone, as before",
			world: func() *world {
				return s15(at(time.Second), nodes("node-1", "node-2", "node-3"), nil)
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
	}
	runPlanCases(t, tests)
}

// TestStallSequence plays a whole stall pass by pass, each plan carrying
// its Disruption to the next as the controller does: the Leases go stale
// together, the Ready flags flip one a second, the kubelets come back one
// every 3 s (node-3 last, 15 s after the first), their Ready flags a
// second after their Leases. No pass may act.
func TestStallSequence(t *testing.T) {
	lastRenewal := t0.Add(-40 * time.Second)
	notReadyAt := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	backAt := map[string]time.Time{}
	for i, n := range []string{"node-0", "node-1", "node-2", "node-4", "node-5", "node-3"} {
		backAt[n] = stallEnd.Add(time.Duration(3*i) * time.Second)
	}
	var prev Disruption
	for now := t0.Add(-45 * time.Second); now.Before(stallEnd.Add(20 * time.Second)); now = now.Add(250 * time.Millisecond) {
		notReady, seen := map[string]bool{}, map[string]time.Time{}
		for i, n := range allSix {
			seen[n] = lastRenewal
			if back := backAt[n]; !now.Before(back) {
				// Renewed every 2 s since it came back.
				seen[n] = now.Add(-now.Sub(back) % (2 * time.Second))
			}
			if !now.Before(notReadyAt(i)) && now.Before(backAt[n].Add(time.Second)) {
				notReady[n] = true
			}
		}
		w := s15(now, notReady, seen)
		for i, n := range w.s.Nodes {
			if !notReady[n.Name] && now.After(t0) {
				n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(backAt[allSix[i]].Add(time.Second))
			}
		}
		w.s.PreviousDisruption = prev
		p := PlanFor(w.s)
		if len(p.Actions) > 0 {
			t.Fatalf("at %s: acted %v: %s", now.Sub(t0), p.Actions[0].Key(), p.Actions[0].Reason)
		}
		prev = p.Disruption
	}
	if prev.EndedAt.IsZero() || prev.Active {
		t.Errorf("after the stall: disruption %+v, want ended", prev)
	}
}
