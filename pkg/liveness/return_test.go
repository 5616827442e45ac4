package liveness

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestReturnIsNoLie: a Dead claim is a lie only when renewals
// contradicted it while it lasted. A node that died (its Lease went stale
// after the claim began) and came back renews while its watchers' last
// reads still say Dead since before that renewal: no disagreement, no
// distrust window.
func TestReturnIsNoLie(t *testing.T) {
	const victim = "n3"
	deadSince := func(w *gossipWorld, since time.Time) {
		for _, x := range w.watchers(victim) {
			w.say(x, victim, GossipDead)
			for i, wa := range w.gossip[x].Watches {
				if wa.Node == victim {
					w.gossip[x].Watches[i].Since = since
				}
			}
		}
	}
	for _, tc := range []struct {
		name  string
		lease Lease
		claim time.Duration // the watchers' Dead since, ago
		lie   bool
	}{
		{name: "died 35 s ago (stale 12 s after its last renewal), back 1 s ago: a return", claim: 35 * time.Second,
			lease: Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second, Gaps: []LeaseGap{{From: ago(38 * time.Second), To: ago(time.Second)}}}},
		{name: "a forger: Dead since 25 s ago while the Lease renewed every 10 s: a lie", claim: 25 * time.Second, lie: true,
			lease: Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second, Gaps: []LeaseGap{{From: ago(21 * time.Second), To: ago(11 * time.Second)}, {From: ago(11 * time.Second), To: ago(time.Second)}}}},
		{name: "a forger after an old return: the stale gap ended before the claim began: a lie", claim: 25 * time.Second, lie: true,
			lease: Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second, Gaps: []LeaseGap{{From: ago(90 * time.Second), To: ago(41 * time.Second)}, {From: ago(11 * time.Second), To: ago(time.Second)}}}},
		{name: "a gap shorter than the renew interval plus the margin is no return: a lie", claim: 10 * time.Second, lie: true,
			lease: Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second, Gaps: []LeaseGap{{From: ago(12 * time.Second), To: ago(time.Second)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			w.leases[victim] = tc.lease
			deadSince(w, ago(tc.claim))
			a := w.assessAt(t0, noHold(), Options{})
			_, distrusted := a.Distrusted[victim]
			if d := a.Disagreements[victim]; (d.Reason == WatchersSayDead) != tc.lie || distrusted != tc.lie {
				t.Fatalf("disagreement %q (%s), distrusted %v; want a lie %v", d.Reason, d.Detail, distrusted, tc.lie)
			}
			if v := a.Of(victim); v.Verdict != Alive {
				t.Errorf("%s: %s", v.Verdict, v.Reason)
			}
		})
	}
}

// TestLeaseTrackerGaps: the tracker keeps the gaps that can tell a return
// from a lie, on rebound's clock.
func TestLeaseTrackerGaps(t *testing.T) {
	var lt LeaseTracker
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, s := range []int{0, 10, 20, 60, 70, 80} { // dead from about 20 s to 60 s
		lt.Observe("n", at(s), 40*time.Second, at(s))
	}
	l := lt.Leases()["n"]
	if !l.StaleAfter(at(25), DefaultLeaseMargin) || !l.StaleAfter(at(15), DefaultLeaseMargin) {
		t.Errorf("the 40 s gap ending at 60 s not seen: %+v", l.Gaps)
	}
	if l.StaleAfter(at(61), DefaultLeaseMargin) {
		t.Errorf("a gap after 61 s: %+v", l.Gaps)
	}
	if l.RenewInterval != 10*time.Second || l.FirstSight {
		t.Errorf("lease %+v", l)
	}
	for i := range 3 * maxLeaseGaps { // gaps growing each time: the oldest drop
		lt.Observe("m", at(i*i), 40*time.Second, at(i*i))
	}
	if n := len(lt.Leases()["m"].Gaps); n == 0 || n > maxLeaseGaps {
		t.Errorf("%d gaps kept, want 1 to %d", n, maxLeaseGaps)
	}
}

// TestRollingReboot: ten nodes; five of them reboot one after another,
// each dead 25 s and back, 30 s apart, with the default distrust window
// (3 min); their watchers' reads lag the truth by a report cycle, so each
// return renews while its watchers' last reads still say Dead. The
// controller's trackers are fed pass by pass as it runs. No return is
// distrusted, nothing holds early judgement, and a sixth node that dies
// afterwards is judged Dead early within 15 s.
func TestRollingReboot(t *testing.T) {
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	start := t0
	sec := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	// down[i] = [from, to) in seconds: n1..n5 reboot; n6 dies at 200 s.
	down := map[string][2]int{}
	for i := 1; i <= 5; i++ {
		down[names[i]] = [2]int{30 * i, 30*i + 25}
	}
	down["n6"] = [2]int{200, 1 << 30}
	isDown := func(n string, s int) bool { d, ok := down[n]; return ok && s >= d[0] && s < d[1] }
	var leases LeaseTracker
	distrust := NewDistrustTracker(sec(-3600))
	renewals := map[string]int{} // the kubelet's last renewal, seconds
	reads := map[string]*GossipReport{}
	// deadSince is when a watcher's probes found n dead (4 s after its
	// death); a watcher sees it alive again 8 s after it returns.
	deadSince := map[string]int{}
	var judged time.Time
	var held, distrusted bool // reported once each
	for s := -30; s <= 240; s++ {
		now := sec(s)
		for i, n := range names {
			if isDown(n, s) {
				continue
			}
			last, ok := renewals[n]
			if !ok || s-last >= 10 || (isDown(n, s-1) && s > -30) {
				// Every 10 s, offset by node, and at once on a return.
				if ok || s%10 == i%10 {
					renewals[n] = s
					leases.Observe(n, now, 40*time.Second, now)
				}
			}
		}
		for i, n := range names {
			if isDown(n, s) {
				if _, ok := deadSince[n]; !ok {
					deadSince[n] = down[n][0] + 4
				}
			} else if d, ok := down[n]; ok && s >= d[1]+8 {
				delete(deadSince, n)
			}
			// Each agent alive writes its read every 5 s (offset by node).
			if isDown(n, s) || (s-i)%5 != 0 {
				continue
			}
			g := &GossipReport{ObservedAt: now, Members: len(names)}
			for _, m := range Watched(n, names, DefaultWatchers) {
				if ds, ok := deadSince[m]; ok && s >= ds {
					g.Watches = append(g.Watches, Watch{Node: m, State: GossipDead, Since: sec(ds)})
				} else {
					g.Watches = append(g.Watches, Watch{Node: m, State: GossipAlive, Since: sec(-3600)})
				}
			}
			reads[n] = g
		}
		var rs []Report
		var nodes []Node
		for _, n := range names {
			nodes = append(nodes, Node{Name: n, Ready: true, Transition: sec(-3600)})
			if g := reads[n]; g != nil {
				rs = append(rs, Report{Reporter: n, Gossip: g})
			}
		}
		distrust.SeeReports(rs, now)
		a := Assess(Input{Nodes: nodes, Reports: rs, Leases: leases.Leases(), FirstSeen: map[string]time.Time{}, Distrust: distrust.Distrust(now)}, now)
		distrust.Observe(a, now)
		if a.Hold.Reason != "" && !held {
			held = true
			t.Errorf("at %d s: early judgement held cluster-wide: %s", s, a.Hold.Detail)
		}
		if len(a.Distrusted) > 0 && !distrusted {
			distrusted = true
			ds := make([]string, 0, len(a.Distrusted))
			for n := range a.Distrusted {
				ds = append(ds, n)
			}
			slices.Sort(ds)
			t.Errorf("at %d s: a return distrusted: %v: %+v", s, ds, a.Disagreements)
		}
		for n, v := range a.Nodes {
			if v.Verdict == Dead && !isDown(n, s) {
				t.Fatalf("at %d s: %s is up, yet Dead: %s", s, n, v.Reason)
			}
		}
		if v := a.Of("n6"); judged.IsZero() && v.Verdict == Dead && v.Early {
			judged = now
		}
	}
	if judged.IsZero() {
		t.Fatal("the sixth death was never judged early")
	}
	if d := judged.Sub(sec(200)); d > 15*time.Second {
		t.Errorf("the sixth death judged %s after it, want at most 15 s", d)
	}
	t.Logf("the sixth death judged Dead early %s after it", judged.Sub(sec(200)))
}
