package liveness

import (
	"testing"
	"time"
)

// TestSelfSilencedNodesDoNotStopEarlyJudgement: a node that drops its
// member and its kubelet port toward the pod network while its kubelet
// renews is Dead to every reader and alive to the API. It is distrusted
// for itself, but it cannot forge anyone else's death, so it does not
// count toward --gossip-distrust-share; forged deaths, contradicted by a
// reader that still has the node answering, do.
func TestSelfSilencedNodesDoNotStopEarlyJudgement(t *testing.T) {
	const dies = "n7"
	// claim makes the first n of node's watchers say it Dead since 20 s
	// ago (before its last renewal, 1 s ago); the others keep their
	// Alive reads, written 1 s ago.
	claim := func(w *gossipWorld, node string, n int) {
		for _, x := range w.watchers(node)[:n] {
			w.say(x, node, GossipDead)
			for i, wa := range w.gossip[x].Watches {
				if wa.Node == node {
					w.gossip[x].Watches[i].Since = ago(20 * time.Second)
				}
			}
		}
	}
	for _, tc := range []struct {
		name    string
		setup   func(w *gossipWorld)
		history *Distrust
		hold    string
		silent  int
	}{
		{name: "two self-silenced nodes of 10: no cluster-wide hold, a third node's real death judged early", silent: 2,
			history: noHold(), setup: func(w *gossipWorld) { claim(w, "n2", 3); claim(w, "n6", 3) }},
		{name: "a forger claiming two live nodes dead, a third watcher still reading each alive: held as before", hold: HoldShare,
			history: noHold(), setup: func(w *gossipWorld) { claim(w, "n2", 2); claim(w, "n6", 2) }},
		{name: "history: two nodes last seen self-silenced within the window: no hold", silent: 2,
			history: &Distrust{Since: ago(time.Hour), LastSaid: map[string]time.Time{"n2": ago(time.Minute), "n6": ago(time.Minute)}, Silent: map[string]bool{"n2": true, "n6": true}}},
		{name: "history: the same two, forged: held", hold: HoldShare,
			history: &Distrust{Since: ago(time.Hour), LastSaid: map[string]time.Time{"n2": ago(time.Minute), "n6": ago(time.Minute)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(10)
			if tc.setup != nil {
				tc.setup(w)
			}
			// n7 really dies: its Lease stale, its watchers Dead since
			// after its last renewal.
			w.stale(dies)
			for _, x := range w.watchers(dies) {
				w.say(x, dies, GossipDead)
			}
			a := w.assessAt(t0, tc.history, Options{})
			if a.Hold.Reason != tc.hold || a.Hold.SelfSilenced != tc.silent {
				t.Fatalf("hold %q with %d self-silenced (%+v), want %q with %d", a.Hold.Reason, a.Hold.SelfSilenced, a.Hold, tc.hold, tc.silent)
			}
			for _, n := range []string{"n2", "n6"} {
				if _, ok := a.Distrusted[n]; !ok {
					t.Errorf("%s not distrusted: %+v", n, a.Disagreements[n])
				}
				if d, ok := a.Disagreements[n]; ok && d.SelfSilenced != (tc.silent > 0) {
					t.Errorf("%s: %+v", n, d)
				}
			}
			v := a.Of(dies)
			if early := v.Verdict == Dead && v.Early; early != (tc.hold == "") {
				t.Errorf("%s: %s (early %v): %s", dies, v.Verdict, v.Early, v.Reason)
			}
		})
	}
}

// TestDistrustTrackerKeepsTheShape: the tracker records whether a node's
// last disagreement was self-silenced, for the passes after.
func TestDistrustTrackerKeepsTheShape(t *testing.T) {
	tr := NewDistrustTracker(ago(time.Hour))
	tr.Observe(Assessment{Disagreements: map[string]Disagreement{
		"s": {Reason: WatchersSayDead, SelfSilenced: true},
		"f": {Reason: WatchersSayDead},
	}}, t0)
	d := tr.Distrust(t0)
	if !d.Silent["s"] || d.Silent["f"] || len(d.LastSaid) != 2 {
		t.Fatalf("history %+v", d)
	}
	// The last disagreement decides: s now contradicted by a reader.
	tr.Observe(Assessment{Disagreements: map[string]Disagreement{"s": {Reason: WatchersSayDead}}}, t0.Add(time.Second))
	if tr.Distrust(t0).Silent["s"] {
		t.Fatal("a later forged shape did not replace the silent one")
	}
}
