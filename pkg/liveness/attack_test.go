package liveness

import (
	"testing"
	"time"
)

// TestTwoPlanesAttack: inputs that make a live node Dead early, one row
// per attack. The victim n3 lives in every row: its host runs and
// serves, only its kubelet is restarting (its Lease not renewed for 13 s,
// stale on rebound's clock) while its watchers' probe path to it is
// broken (a firewall, another key: they have it Dead since before a
// renewal rebound watched), the planes' disagreement the distrust rules
// exist for. Upstream does nothing to such a node for its 50 s grace.
// Rows marked control show the rule holding without the attack.
func TestTwoPlanesAttack(t *testing.T) {
	const victim = "n3"
	// deadVotes: every watcher of the victim has it Dead since since and
	// wrote that read at read, both by the watcher's clock, skew ahead of
	// rebound's (the controller's clock behind the agents' by skew).
	deadVotes := func(since, read, skew time.Duration) func(w *gossipWorld) {
		return func(w *gossipWorld) {
			for _, x := range w.watchers(victim) {
				w.say(x, victim, GossipDead)
				g := w.gossip[x]
				g.ObservedAt = ago(read).Add(skew)
				for i := range g.Watches {
					if g.Watches[i].Node == victim {
						g.Watches[i].Since = ago(since).Add(skew)
					}
				}
			}
		}
	}
	kubeletRestarting := func(w *gossipWorld) { w.stale(victim) } // last renewal seen 13 s ago
	tests := []struct {
		name    string
		setup   func(w *gossipWorld)
		history *Distrust
		// seen, when set, is how long ago the controller's pass first
		// saw the watchers' Dead reads, on its own clock: the history
		// is then a DistrustTracker fed as the controller feeds it.
		seen time.Duration
		opts Options
	}{
		{name: "control: votes Dead since 18 s ago, the Lease renewed 13 s ago: refuted",
			history: noHold(), setup: func(w *gossipWorld) { deadVotes(18*time.Second, 5*time.Second, 0)(w); kubeletRestarting(w) }},
		// One clock: rebound's. Compared at face value with the
		// controller's, agents' clocks 20 s ahead (inside MaxClockSkew,
		// so the reads are fresh) would move every watcher's death after
		// the renewal that refutes it. The controller times each Dead
		// vote by when its own pass first saw it (DistrustTracker's
		// SeeReports), as it runs: the agents' clocks decide nothing.
		{name: "one clock: the controller's clock 20 s behind the agents' (within MaxClockSkew) un-refutes Dead votes from before the last renewal",
			seen: 17 * time.Second, setup: func(w *gossipWorld) {
				deadVotes(18*time.Second, 5*time.Second, 20*time.Second)(w)
				kubeletRestarting(w)
			}},
		{name: "one clock: the controller's clock 20 s behind makes Dead reads from before the loss count",
			seen: 17 * time.Second, setup: func(w *gossipWorld) {
				deadVotes(18*time.Second, 17*time.Second, 20*time.Second)(w)
				kubeletRestarting(w)
			}},
		{name: "one clock: the controller's clock 10 s behind (a third of MaxClockSkew) is enough",
			seen: 17 * time.Second, setup: func(w *gossipWorld) {
				deadVotes(18*time.Second, 5*time.Second, 10*time.Second)(w)
				kubeletRestarting(w)
			}},
		// Restart mid-incident with the shortest valid window: the
		// restart hold ends before the new process can have watched a
		// single renewal, and a first-sight Lease refutes nothing, so the
		// disagreement the previous leader held the node for is never
		// re-learnt before the node is judged.
		{name: "restart: --gossip-distrust-window 5s ends the restart hold before any Lease is seen renewing; a distrusted plane judges early",
			opts:    Options{GossipDistrustWindow: 5 * time.Second},
			history: &Distrust{Since: ago(13 * time.Second)},
			setup: func(w *gossipWorld) {
				deadVotes(time.Minute, 2*time.Second, 0)(w)
				// The new process's first sight of the Lease, at its start.
				w.leases[victim] = Lease{RenewSeen: ago(13 * time.Second), RenewInterval: 10 * time.Second, FirstSight: true}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			tc.setup(w)
			history := tc.history
			if tc.seen > 0 {
				tr := NewDistrustTracker(ago(time.Hour))
				tr.SeeReports(w.reports(), ago(tc.seen))
				history = tr.Distrust(t0)
			}
			a := w.assessAt(t0, history, tc.opts)
			v := a.Of(victim)
			if !v.LeaseStale {
				t.Fatalf("setup: the victim's Lease is not stale: %s", v.Reason)
			}
			if v.Verdict == Dead || v.Early {
				t.Fatalf("a live node is %s (early %v), upstream would do nothing for its grace: %s", v.Verdict, v.Early, v.Reason)
			}
		})
	}
}

// TestOneReportDecides: in a cluster whose agents gossip only (no BIRD:
// their reports carry no observedAt and no sessions), one node's agent
// writes BGP sessions into its own PeeringReport. It is then the only
// observer, the quorum of one observer is one, and its word alone makes a
// NotReady node Dead, even one whose kubelet still renews its Lease (it
// reports NotReady itself: a runtime hiccup), with every gossip watcher
// silent on it. The peering planner then takes the node out of the mesh
// on one report; upstream keeps peering with it.
//
// Accepted for now, and the row says so by asserting today's verdict: the
// quorum of one is seed 003's own case (three nodes, two dead: the one
// survivor's BGP sessions are the only witness there is), and this is the
// older BGP plane, not the gossip plane this change hardens. The row
// fails the day a lone BGP observer stops deciding, and must then be
// turned around.
func TestOneReportDecides(t *testing.T) {
	const victim, liar = "n3", "n1"
	for _, tc := range []struct {
		name   string
		renews bool
	}{
		{name: "its Lease renewing (the kubelet reaches the API)", renews: true},
		{name: "its Lease stale, the gossip plane silent on it", renews: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			for i := range w.nodes {
				if w.nodes[i].Name == victim {
					w.nodes[i] = down(victim, ago(2*time.Minute))
				}
			}
			if !tc.renews {
				w.stale(victim)
			}
			for _, x := range w.watchers(victim) {
				g := w.gossip[x]
				var keep []Watch
				for _, wa := range g.Watches {
					if wa.Node != victim {
						keep = append(keep, wa)
					}
				}
				g.Watches = keep
			}
			rs := w.reports()
			for i := range rs {
				if rs[i].Reporter == liar {
					rs[i].ObservedAt = ago(time.Second)
					rs[i].Sessions = []Session{lost(victim)}
				}
			}
			a := Assess(Input{Nodes: w.nodes, Reports: rs, Leases: w.leases, FirstSeen: map[string]time.Time{}, Distrust: noHold()}, t0)
			if v := a.Of(victim); v.Verdict != Dead {
				t.Fatalf("accepted finding changed: one BGP report no longer makes %s Dead (%s): turn this row around", victim, v.Reason)
			}
		})
	}
}
