package liveness

import (
	"strings"
	"testing"
	"time"
)

func (w *gossipWorld) coverage() Coverage {
	var rs []Report
	for _, n := range w.nodes {
		if g := w.gossip[n.Name]; g != nil {
			rs = append(rs, Report{Reporter: n.Name, Gossip: g})
		}
	}
	return CoverageOf(Input{Nodes: w.nodes, Reports: rs, Leases: w.leases}, t0)
}

// forget makes every watcher of node stop listing it: its member is gone
// from their rings (its agent never joined, or died past the dead
// retention).
func (w *gossipWorld) forget(node string) {
	for _, g := range w.gossip {
		var keep []Watch
		for _, x := range g.Watches {
			if x.Node != node {
				keep = append(keep, x)
			}
		}
		g.Watches = keep
	}
}

// TestCoverage: a Ready node whose early detection is off, or rests on the
// Lease alone, is named with the reason; one row per way the gossip plane
// or the Lease plane can be missing.
func TestCoverage(t *testing.T) {
	const victim = "n3"
	tests := []struct {
		name  string
		setup func(w *gossipWorld)
		mode  CoverageMode
		own   string
		words []string
		// off is the cluster-wide reason, when every node is off.
		off string
	}{
		{name: "every agent gossips and every Lease renews: on", mode: CoverageOn, own: OwnGossipFresh},
		{name: "its agent is down, still on its watchers' rings: they say dead while its Lease renews, the planes disagree", mode: CoverageLeaseOnly, own: OwnGossipMissing,
			words: []string{"no gossip report from its member", "3 of its 3 gossip watchers say dead", "the planes disagree (WatchersSayDead)"},
			setup: func(w *gossipWorld) {
				delete(w.gossip, victim)
				for _, x := range w.watchers(victim) {
					w.say(x, victim, GossipDead)
				}
			}},
		{name: "its agent never joined: no watcher lists it, off", mode: CoverageOff, own: OwnGossipMissing,
			words: []string{"no gossip report from its member", "only 0 of its 3 gossip watchers can vote on it, short of the quorum of 2", "do not list it"},
			setup: func(w *gossipWorld) {
				delete(w.gossip, victim)
				w.forget(victim)
			}},
		{name: "its agent's read is stale and its watchers forgot it: off, the time said", mode: CoverageOff, own: OwnGossipStale,
			words: []string{"its member's gossip report is stale (written at 2026-03-01T11:50:00Z)", "do not list it"},
			setup: func(w *gossipWorld) {
				w.gossip[victim].ObservedAt = ago(10 * time.Minute)
				w.forget(victim)
			}},
		{name: "two of its watchers NotReady or with a stale Lease: they abstain, off", mode: CoverageOff, own: OwnGossipFresh,
			words: []string{"only 1 of its 3 gossip watchers can vote on it", "abstain (NotReady, or their own Lease is stale)"},
			setup: func(w *gossipWorld) {
				ws := w.watchers(victim)
				for i := range w.nodes {
					if w.nodes[i].Name == ws[0] {
						w.nodes[i] = down(ws[0], ago(time.Minute))
					}
				}
				w.stale(ws[1])
			}},
		{name: "no Lease of it: off", mode: CoverageOff, own: OwnGossipFresh, words: []string{"no Lease renewal of it to time"},
			setup: func(w *gossipWorld) { delete(w.leases, victim) }},
		{name: "only two agents' reads fresh: fewer than two watchers for a gossiping node", mode: CoverageOff, own: OwnGossipFresh,
			words: []string{"fewer than two gossip watchers (1, on a ring of 2 fresh gossip reads)"},
			setup: func(w *gossipWorld) {
				ws := w.watchers(victim)
				for _, n := range w.nodes {
					if n.Name != victim && n.Name != ws[0] {
						w.gossip[n.Name].ObservedAt = ago(time.Hour)
					}
				}
			}},
		{name: "dead on both planes now: detection worked, on", mode: CoverageOn, own: OwnGossipMissing,
			setup: func(w *gossipWorld) {
				delete(w.gossip, victim)
				w.stale(victim)
				for _, x := range w.watchers(victim) {
					w.say(x, victim, GossipDead)
				}
			}},
		{name: "every gossip read stale: off for every node, said once", off: "no agent's gossip read is fresh",
			setup: func(w *gossipWorld) {
				for _, g := range w.gossip {
					g.ObservedAt = ago(time.Hour)
				}
			}},
		{name: "no Lease plane at all: off for every node, said once", off: "no Lease plane",
			setup: func(w *gossipWorld) { w.leases = nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(6)
			if tc.setup != nil {
				tc.setup(w)
			}
			c := w.coverage()
			if !c.InUse {
				t.Fatal("InUse = false with agents gossiping")
			}
			if tc.off != "" {
				if !strings.Contains(c.Off, tc.off) || len(c.Nodes) != 0 {
					t.Fatalf("Off = %q, %d nodes; want %q and none", c.Off, len(c.Nodes), tc.off)
				}
				return
			}
			nc, ok := c.Nodes[victim]
			if !ok {
				t.Fatalf("no coverage for %s: %+v", victim, c)
			}
			if nc.Mode != tc.mode || nc.OwnGossip != tc.own {
				t.Errorf("mode %s, own %s; want %s, %s (%s)", nc.Mode, nc.OwnGossip, tc.mode, tc.own, nc.Reason)
			}
			if (nc.Mode == CoverageOn) != (nc.Reason == "") {
				t.Errorf("mode %s with reason %q", nc.Mode, nc.Reason)
			}
			for _, word := range tc.words {
				if !strings.Contains(nc.Reason, word) {
					t.Errorf("reason lacks %q: %s", word, nc.Reason)
				}
			}
			// The coverage never contradicts the verdict it explains.
			if v := w.assess().Nodes[victim]; v.Early && nc.Mode != CoverageOn {
				t.Errorf("the node is Dead early, yet its coverage is %s", nc.Mode)
			}
		})
	}
}

// TestCoverageNotInUse: without any gossip read, nothing is said: early
// detection is off by design, not by fault.
func TestCoverageNotInUse(t *testing.T) {
	w := newGossipWorld(4)
	w.gossip = map[string]*GossipReport{}
	if c := w.coverage(); c.InUse || len(c.Nodes) != 0 || c.Off != "" {
		t.Errorf("coverage without gossip = %+v", c)
	}
}
