package liveness

import (
	"slices"
	"testing"
	"time"
)

// TestAttackForgerPassesForSelfSilenced: two forgers on a quorum of n2's
// and of n6's ring watchers claimed both live nodes Dead a minute ago; a
// third watcher of each still read them alive, so both were counted
// toward the share and early judgement was held cluster-wide (history:
// LastSaid, not Silent). The forgers now renew their claims (a new
// Since, 5 s ago: a new Dead watch) right after the honest watchers'
// periodic write, 45 s ago, and before their next (every 60 s). No read
// written since the renewed claim began has either node answering, so
// this pass calls both SelfSilenced, and "the node's last disagreement
// decides": neither counts any more, the cluster-wide hold lifts, for up
// to 30 s of every report interval, with the same two forgers and the
// same two live victims. A node once seen forged within its window should
// not pass for self-silenced on an honest read's mere age.
func TestAttackForgerPassesForSelfSilenced(t *testing.T) {
	w := newGossipWorld(10)
	// Two victims whose honest (third) watcher forges for neither.
	var victims []string
	for _, a := range w.nodes {
		for _, b := range w.nodes {
			if victims != nil || a.Name >= b.Name {
				continue
			}
			wa, wb := w.watchers(a.Name), w.watchers(b.Name)
			if !slices.Contains(wb[:2], wa[2]) && !slices.Contains(wa[:2], wb[2]) && wa[2] != b.Name && wb[2] != a.Name {
				victims = []string{a.Name, b.Name}
			}
		}
	}
	if victims == nil {
		t.Fatal("setup: no two victims")
	}
	for _, node := range victims {
		ws := w.watchers(node)
		for _, x := range ws[:2] {
			w.say(x, node, GossipDead)
			for i, wa := range w.gossip[x].Watches {
				if wa.Node == node {
					w.gossip[x].Watches[i].Since = ago(5 * time.Second)
				}
			}
		}
	}
	for _, node := range victims {
		w.gossip[w.watchers(node)[2]].ObservedAt = ago(45 * time.Second)
	}
	history := &Distrust{Since: ago(time.Hour), LastSaid: map[string]time.Time{victims[0]: ago(time.Minute), victims[1]: ago(time.Minute)}}
	a := w.assessAt(t0, history, Options{})
	for _, n := range victims {
		if _, ok := a.Distrusted[n]; !ok {
			t.Errorf("%s not distrusted: %+v", n, a.Disagreements[n])
		}
	}
	if a.Hold.Reason != HoldShare {
		t.Fatalf("hold %q (%+v): two live nodes forged dead within the window, counted a minute ago, no longer count (disagreements %+v)", a.Hold.Reason, a.Hold, a.Disagreements)
	}
}
