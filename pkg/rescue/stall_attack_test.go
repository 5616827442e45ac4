package rescue

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/pkg/liveness"
)

// Attack rows against the Lease plane at a stall's edges. Each row says
// what must (not) happen; a row that fails is a defect, see the names.
// The worlds reuse s15 (six nodes, coredns on node-3, maxUnavailableTime
// 0s, Leases stale leaseStaleAfter after their last renewal) and s1.

// attackCase is looser than planCase: only whether coredns is deleted and,
// optionally, its decision.
type attackCase struct {
	name       string
	world      func() *world
	wantDelete bool
	// want is coredns's expected decision; "" for any.
	want Decision
}

func runAttackCases(t *testing.T, tests []attackCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanFor(tc.world().s)
			deleted := false
			for _, a := range p.Actions {
				if a.Pod == coredns && (a.Kind == ActionDelete || a.Kind == ActionForceDelete) {
					deleted = true
				}
			}
			var got Decision
			var reason string
			for _, c := range p.Critical {
				if c.Name == coredns {
					got, reason = c.Decision, c.Reason
				}
			}
			if deleted != tc.wantDelete || (tc.want != "" && got != tc.want) {
				t.Errorf("coredns deleted=%v decision %s, want deleted=%v decision %q\n  reason: %s\n  disruption: %+v",
					deleted, got, tc.wantDelete, tc.want, reason, p.Disruption)
			}
		})
	}
}

// sinceFirstSight sets every NotReady node's verdict Since to seen: a
// controller restarted at seen starts its clocks there.
func sinceFirstSight(w *world, seen time.Time) {
	for name, v := range w.s.Verdicts {
		if v.Verdict != liveness.Alive && v.Since.Before(seen) {
			v.Since = seen
			w.s.Verdicts[name] = v
		}
	}
}

// setLease gives one node's verdict a Lease plane renewed at seen and
// going stale after staleAfter.
func setLease(w *world, name string, seen time.Time, staleAfter time.Duration) {
	v := w.s.Verdicts[name]
	v.LeaseRenewSeen, v.LeaseStaleAt = seen, seen.Add(staleAfter)
	v.LeaseStale = w.s.Now.After(v.LeaseStaleAt)
	w.s.Verdicts[name] = v
}

func TestStallAttack(t *testing.T) {
	cut := t0.Add(-45 * time.Second) // every kubelet's last renewal
	restart := at(30 * time.Second)  // a controller restart mid-stall
	end := stallEnd                  // the first kubelet back
	runAttackCases(t, []attackCase{
		// DEFECT. The controller restarts while kube-controller-manager is
		// flipping the Ready flags (node-1..3 NotReady, 0, 4, 5 still
		// Ready). The tracker takes its first sight of every Lease as a
		// renewal, one Lease after the other as the informer lists them
		// (here 1 ms apart, node-3 first). node-3's clock starts when its
		// own Lease goes stale, but the stall is declared only when the
		// LAST Lease goes stale: in between, node-3 is stranded
		// (maxUnavailableTime 0s) and the others' Leases look fresh, so a
		// Ready node cut off from the API like the rest is a target.
		// Upstream evicts nothing for 300 s (the default toleration), and
		// rebound's own header says nothing may be deleted at a stall's
		// start whatever maxUnavailableTime.
		{
			name: "restart mid-stall: node-3's Lease, first seen 1 ms before the others, goes stale first: deleted before the stall is declared",
			world: func() *world {
				seen := map[string]time.Time{}
				for i, n := range []string{"node-3", "node-0", "node-1", "node-2", "node-4", "node-5"} {
					seen[n] = restart.Add(time.Duration(i) * time.Millisecond)
				}
				w := s15(restart.Add(leaseStaleAfter+500*time.Microsecond), nodes("node-1", "node-2", "node-3"), seen)
				sinceFirstSight(w, restart)
				leaseFirstSight(w)
				return w
			},
			wantDelete: false,
		},
		// DEFECT (boundary). Same, every Lease first seen at the same
		// instant: the planner wakes exactly at node-3's deadline, which
		// is its Lease's StaleAt; liveness calls a Lease stale only after
		// StaleAt, so no Lease is stale and no stall is seen, but the
		// clock has started: deleted.
		{
			name: "restart mid-stall: a pass exactly at the Leases' StaleAt (the planner's own wake): deleted",
			world: func() *world {
				w := s15(restart.Add(leaseStaleAfter), nodes("node-1", "node-2", "node-3"), renewals(restart, allSix...))
				sinceFirstSight(w, restart)
				leaseFirstSight(w)
				return w
			},
			wantDelete: false,
		},
		// Holds: a millisecond later every Lease is stale: Held.
		{
			name: "restart mid-stall: every Lease stale: held",
			world: func() *world {
				w := s15(restart.Add(leaseStaleAfter+time.Millisecond), nodes("node-1", "node-2", "node-3"), renewals(restart, allSix...))
				sinceFirstSight(w, restart)
				return w
			},
			want: DecisionHeld,
		},
		// Holds. One kubelet with a longer nodeLeaseDurationSeconds (240
		// s: renews every 60 s) keeps "renewing" on rebound's clock for
		// 62 s after the cut, longer than kube-controller-manager's 50 s
		// node grace period: the Ready flags flip while its Lease still
		// looks fresh, no stall is seen, and node-5 (as cut off as the
		// rest) is a target. But node-0 and node-4, Ready with stale
		// Leases, are open to the scheduler: the delete waits for their
		// taints, by which time the Ready flags tell the stall.
		{
			name: "stall's start: node-5's Lease renews every 60 s, still fresh when node-3 flips NotReady: node-0 and node-4 still Ready and untainted, not yet",
			world: func() *world {
				w := s15(at(time.Second), nodes("node-1", "node-2", "node-3"), renewals(cut, allSix...))
				setLease(w, "node-5", cut, 62*time.Second)
				return w
			},
			want: DecisionNotYet,
		},
		// ACCEPTED. The same once node-0 and node-4 flip too (tainted
		// NoSchedule as kube-controller-manager does at the flip): node-5
		// (as cut off as the rest) is a target and takes the replacement.
		// Such a kubelet renews less often than the node grace period
		// allows, so upstream flaps it NotReady every minute anyway: a
		// configuration to fix, not one to plan for.
		{
			name: "stall's start: node-5's Lease renews every 60 s, every other node NotReady and tainted: deleted, replacement sent to node-5",
			world: func() *world {
				w := s15(at(time.Second), nodes("node-0", "node-1", "node-2", "node-3", "node-4"), renewals(cut, allSix...))
				setLease(w, "node-5", cut, 62*time.Second)
				return w
			},
			wantDelete: true,
		},
		// Holds: a node without a Lease in the tracker (informer not
		// synced, a Lease-less node) does not break the stall.
		{
			name: "partial Lease plane: the Ready nodes have no Lease known, every known Lease stale: held",
			world: func() *world {
				return s15(at(time.Second), nodes("node-1", "node-2", "node-3"), renewals(cut, "node-1", "node-2", "node-3"))
			},
			want: DecisionHeld,
		},
		// DEFECT (robustness). PlanFor counts the Lease plane over
		// Snapshot.Verdicts, not over Snapshot.Nodes: a verdict for a
		// node the snapshot does not hold (a Lease with no Node, or
		// verdicts judged from another node list) with a fresh Lease ends
		// the stall.
		{
			name: "a verdict with a fresh Lease for a node not in the snapshot breaks the stall: deleted",
			world: func() *world {
				w := s15(at(time.Second), nodes("node-1", "node-2", "node-3"), renewals(cut, allSix...))
				w.s.Verdicts["node-9"] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: at(0), LeaseStaleAt: at(leaseStaleAfter)}
				// A Ready node whose Lease is unknown takes the replacement.
				w.node("node-6", "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
				return w
			},
			wantDelete: false,
		},
		// ACCEPTED (restart + skew; it predates the Lease plane). The
		// controller restarts as the stall
		// ends (PreviousDisruption lost); node-0 is back first, its
		// kubelet's clock 1 h behind, so its Ready transition reads an
		// hour ago and zone.FullDisruptionEnd (the earliest Ready
		// transition) is an hour old: the "node grace period after the
		// first return" never applies. node-3 (back at end+30s) is
		// deleted at end+20s, within the grace.
		{
			name: "restart at the stall's end, first node back with its kubelet clock 1 h behind: node-3 deleted within the node grace period",
			world: func() *world {
				seen := renewals(end, allSix...) // the new tracker's first sight
				seen["node-0"] = end.Add(18 * time.Second)
				w := s15(end.Add(20*time.Second), nodes("node-1", "node-2", "node-3", "node-4", "node-5"), seen)
				node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(end.Add(-time.Hour))
				v := w.s.Verdicts["node-0"]
				v.Since = end.Add(-time.Hour)
				w.s.Verdicts["node-0"] = v
				sinceFirstSight(w, end)
				return w
			},
			wantDelete: true, // two faults at once; the Lease re-read still refuses the delete if node-3's kubelet renews first
		},
		// Holds: the same without the skew.
		{
			name: "restart at the stall's end, node-0's clock right: not yet",
			world: func() *world {
				seen := renewals(end, allSix...)
				seen["node-0"] = end.Add(18 * time.Second)
				w := s15(end.Add(20*time.Second), nodes("node-1", "node-2", "node-3", "node-4", "node-5"), seen)
				node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(end)
				sinceFirstSight(w, end)
				return w
			},
			want: DecisionNotYet,
		},
		// Holds (by design): a NotReady node whose Lease renews for hours
		// (runtime or CNI down, kubelet up) is never stranded. Upstream
		// taints it not-ready and evicts after the toleration, so
		// rebound's hold leaves upstream's behaviour, never worse.
		{
			name: "Ready=False for 3 h with its Lease renewing: not yet, for ever",
			world: func() *world {
				now := at(3 * time.Hour)
				return s15(now, nodes("node-3"), renewals(now.Add(-time.Second), allSix...))
			},
			want: DecisionNotYet,
		},
		// A Ready node whose Lease is stale (cache one event behind on the
		// flag) is no target: with every other Ready node stale too, no
		// target, and nothing deleted.
		{
			name: "node-3 dead, the Ready nodes' flags a cache event behind and their Leases stale, node-3's fresh-looking: nothing deleted",
			world: func() *world {
				seen := renewals(cut, allSix...)
				return s15(at(time.Second), nodes("node-3"), seen)
			},
			wantDelete: false,
		},
	})
}

// TestS1Attack: the seed S1 (4 of 5 NotReady, one alive) must still be
// rescued on the Lease plane.
func TestS1Attack(t *testing.T) {
	now := at(31 * time.Second)
	withLeases := func(w *world, seen map[string]time.Time) *world {
		w.s.Verdicts = map[string]liveness.NodeVerdict{}
		for _, n := range w.s.Nodes {
			ready, _, since := readyCondition(n)
			v := liveness.NodeVerdict{Verdict: liveness.Alive, Since: since}
			if !ready {
				v.Verdict = liveness.Unknown
			}
			w.s.Verdicts[n.Name] = v
			if s, ok := seen[n.Name]; ok {
				setLease(w, n.Name, s, leaseStaleAfter)
			}
		}
		return w
	}
	dead := t0.Add(-45 * time.Second)
	runAttackCases(t, []attackCase{
		{
			name: "S1 on the Lease plane: node-0 renews, 1-4 stale: rescued",
			world: func() *world {
				seen := map[string]time.Time{"node-0": now.Add(-time.Second), "node-1": dead, "node-2": dead, "node-3": dead, "node-4": dead}
				return withLeases(s1(now), seen)
			},
			wantDelete: true,
		},
		// ACCEPTED (held, as upstream). The live node has no Lease known
		// (a virtual kubelet, a Lease without leaseDurationSeconds): the
		// four dead nodes' stale Leases are every Lease known, so "no
		// Lease renews" holds S1. The other way round, a Ready node
		// without a Lease would end every stall (the row "partial Lease
		// plane" above), and a stall is where acting is worse than
		// upstream; holding is never worse than upstream, which holds S1
		// for ever too. diagnose names the rule that held.
		{
			name: "S1, node-0 (alive, Ready) has no Lease plane: held for ever",
			world: func() *world {
				seen := map[string]time.Time{"node-1": dead, "node-2": dead, "node-3": dead, "node-4": dead}
				return withLeases(s1(now), seen)
			},
			want: DecisionHeld,
		},
		// DEFECT (pre-existing, not introduced by the Lease plane, now
		// also pushed a node grace period further): node-0's kubelet
		// clock is a day ahead, so its Ready transition (written by the
		// kubelet) is in the future; FullDisruptionEnd takes it as the end
		// of a full disruption and no clock starts before then + 50 s.
		{
			name: "S1, node-0's kubelet clock a day ahead: its Ready transition in the future delays the rescue by a day",
			world: func() *world {
				seen := map[string]time.Time{"node-0": now.Add(-time.Second), "node-1": dead, "node-2": dead, "node-3": dead, "node-4": dead}
				w := withLeases(s1(now), seen)
				node0(w).Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-time.Hour + 24*time.Hour))
				return w
			},
			wantDelete: true,
		},
		// DEFECT (regression: rescue deferred). A 15 s control-plane blip
		// (an apiserver restart, an etcd election) stops every renewal
		// for longer than interval + margin: rebound sees a Lease stall,
		// and its end restarts node-3's clock at the end + 50 s. Upstream
		// saw nothing (no Ready flag flipped: kube-controller-manager
		// enters full disruption only when every node is NotReady, after
		// its grace), so it restarted nothing.
		{
			name: "S1, node-3 dead for an hour, a 15 s API blip ended 10 s ago (no Ready flag flipped): the rescue waits 50 s + maxUnavailableTime again",
			world: func() *world {
				later := at(time.Hour)
				seen := map[string]time.Time{"node-0": later.Add(-time.Second), "node-1": dead, "node-2": dead, "node-3": dead, "node-4": dead}
				w := withLeases(s1(later), seen)
				w.s.PreviousDisruption = Disruption{StartedAt: later.Add(-25 * time.Second), EndedAt: later.Add(-10 * time.Second)}
				return w
			},
			wantDelete: true,
		},
	})
}

// TestS1RecurringBlips: node-3 dies (S1); from 5 s later the control plane
// blips, 40 s of every 2 min (rolling apiserver restarts, a flapping load
// balancer): each blip stops every renewal past interval + margin, a stall
// for rebound, though no Ready flag flips (kube-controller-manager's 50 s
// grace is never reached). Passes come as in the controller: at the
// plan's own wake, and on an event every 10 s outside the blips (during a
// blip no watch event arrives). Holds: each blip a pass sees restarts the
// clock (TestS1Attack's blip row), but the rescue still comes, within
// 5 min instead of 30 s. With a pass every second (never the case during
// an outage) it would never come.
func TestS1RecurringBlips(t *testing.T) {
	const blip, period = 40 * time.Second, 2 * time.Minute
	dead := t0
	start := t0.Add(5 * time.Second)
	blipping := func(now time.Time) bool { return now.After(start) && now.Sub(start)%period < blip }
	var prev Disruption
	lastRenew, nextEvent := t0, t0
	for now := t0; now.Before(t0.Add(5 * time.Minute)); {
		if !blipping(now) {
			lastRenew = now.Add(-now.Sub(t0) % (2 * time.Second)) // renewed every 2 s
		}
		w := s1(now)
		for i := 1; i <= 4; i++ {
			w.s.Nodes[i].Status.Conditions[0].LastTransitionTime = metav1.NewTime(dead)
		}
		w.s.Verdicts = map[string]liveness.NodeVerdict{"node-0": {Verdict: liveness.Alive, Since: t0.Add(-2 * time.Hour)}}
		setLease(w, "node-0", lastRenew, 12*time.Second)
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("node-%d", i)
			w.s.Verdicts[name] = liveness.NodeVerdict{Verdict: liveness.Unknown, Since: dead}
			setLease(w, name, dead.Add(-45*time.Second), 12*time.Second)
		}
		w.s.PreviousDisruption = prev
		p := PlanFor(w.s)
		prev = p.Disruption
		if len(p.Actions) > 0 {
			t.Logf("rescued at %s (without blips: 30s)", now.Sub(t0))
			return
		}
		for nextEvent = nextEvent.Add(10 * time.Second); blipping(nextEvent); nextEvent = nextEvent.Add(10 * time.Second) {
		}
		next := nextEvent
		if !p.NextCheck.IsZero() && p.NextCheck.After(now) && p.NextCheck.Before(next) {
			next = p.NextCheck
		}
		now = next
	}
	t.Errorf("node-3 dead since t0, node-0 Ready, the API blipping %s every %s: not rescued in 5 min (disruption %+v)", blip, period, prev)
}

// TestStallFlappingSequence: the control plane flaps during a stall: the
// kubelets get through for 3 s every 40 s (a few renew, node-0's flag
// comes back, then goes again); node-3 really died at the start. No pass
// may act before the flapping stops, and node-3 is rescued a node grace
// period after the last end (maxUnavailableTime 0s).
func TestStallFlappingSequence(t *testing.T) {
	start := t0
	stop := t0.Add(5 * time.Minute)
	up := func(now time.Time) bool {
		return now.After(start) && now.Before(stop) && now.Sub(start)%(40*time.Second) < 3*time.Second || !now.Before(stop)
	}
	var prev Disruption
	renew := map[string]time.Time{}
	for _, n := range allSix {
		renew[n] = start.Add(-time.Second)
	}
	var node0Back time.Time
	var lastEnd time.Time
	acted := time.Time{}
	for now := start.Add(time.Minute); now.Before(stop.Add(2 * time.Minute)); now = now.Add(500 * time.Millisecond) {
		if up(now) {
			for _, n := range allSix {
				if n != "node-3" && now.Sub(renew[n]) >= 2*time.Second {
					renew[n] = now
				}
			}
			if node0Back.IsZero() {
				node0Back = now.Add(time.Second)
			}
		} else if !node0Back.IsZero() && now.Sub(renew["node-0"]) > 50*time.Second {
			node0Back = time.Time{}
		}
		notReady := nodes("node-1", "node-2", "node-3", "node-4", "node-5")
		if node0Back.IsZero() || now.Before(node0Back) {
			notReady["node-0"] = true
		}
		if !now.Before(stop.Add(time.Second)) {
			notReady = nodes("node-3")
		}
		w := s15(now, notReady, renew)
		for _, n := range w.s.Nodes {
			if !notReady[n.Name] {
				n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(node0Back)
				if !now.Before(stop.Add(time.Second)) {
					n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(stop.Add(time.Second))
				}
			}
		}
		w.s.PreviousDisruption = prev
		p := PlanFor(w.s)
		if prev.Active && !p.Disruption.Active {
			lastEnd = now
		}
		prev = p.Disruption
		if len(p.Actions) > 0 {
			acted = now
			break
		}
	}
	if acted.IsZero() {
		t.Fatalf("node-3 never rescued after the flapping stopped (disruption %+v)", prev)
	}
	if acted.Before(stop) || acted.Before(lastEnd.Add(50*time.Second)) {
		t.Errorf("acted at %s, before the flapping stopped (%s) or a node grace period after the last end (%s)", acted.Sub(t0), stop.Sub(t0), lastEnd.Sub(t0))
	}
}

// leaseFirstSight marks every Lease of w as a restarted tracker's first
// sight (liveness.Lease.FirstSight), not a renewal it watched.
func leaseFirstSight(w *world) {
	for name, v := range w.s.Verdicts {
		if !v.LeaseStaleAt.IsZero() {
			v.LeaseFirstSight = true
			w.s.Verdicts[name] = v
		}
	}
}
