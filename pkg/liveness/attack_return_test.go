package liveness

import (
	"testing"
	"time"
)

// TestAttackForgedReturn: forgers on a quorum of n3's ring watchers
// backdate their Dead claim to before an old stale gap of n3's Lease (a
// kubelet restart 90 s ago), hoping the claim passes for a death followed
// by a return (Lease.StaleAfter) and escapes distrust. The production
// history (Distrust.DeadSeen, rebound's clock) dates the claim from its
// first sight, after that gap: it is a lie, and n3 is distrusted.
// Guard: holds on main.
func TestAttackForgedReturn(t *testing.T) {
	const victim = "n3"
	w := newGossipWorld(7)
	w.leases[victim] = Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second,
		Gaps: []LeaseGap{{From: ago(90 * time.Second), To: ago(41 * time.Second)}, {From: ago(11 * time.Second), To: ago(time.Second)}}}
	for _, x := range w.watchers(victim) {
		w.say(x, victim, GossipDead)
		for i, wa := range w.gossip[x].Watches {
			if wa.Node == victim {
				w.gossip[x].Watches[i].Since = ago(2 * time.Minute)
			}
		}
	}
	var tr DistrustTracker
	tr.SeeReports(w.reports(), ago(25*time.Second)) // first seen 25 s ago, after the old gap
	d := tr.Distrust(t0)
	d.Since = ago(time.Hour)
	a := w.assessAt(t0, d, Options{})
	if dis := a.Disagreements[victim]; dis.Reason != WatchersSayDead {
		t.Fatalf("disagreement %q (%s): a backdated forged claim passed for a return", dis.Reason, dis.Detail)
	}
	if v := a.Of(victim); v.Verdict != Alive {
		t.Errorf("%s: %s", v.Verdict, v.Reason)
	}
}
