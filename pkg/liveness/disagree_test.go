package liveness

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func (w *gossipWorld) reports() []Report {
	var rs []Report
	for _, n := range w.nodes {
		if g := w.gossip[n.Name]; g != nil {
			rs = append(rs, Report{Reporter: n.Name, Gossip: g})
		}
	}
	return rs
}

// assessAt judges the world at now with a history (nil: none kept).
func (w *gossipWorld) assessAt(now time.Time, d *Distrust, opts Options) Assessment {
	return Assess(Input{Nodes: w.nodes, Reports: w.reports(), Leases: w.leases, FirstSeen: map[string]time.Time{}, Distrust: d, Options: opts}, now)
}

// noHold is a history that began long ago and recorded nothing.
func noHold() *Distrust { return &Distrust{Since: ago(time.Hour)} }

// TestPlanesDisagree: the controller's side of each way the gossip plane
// was found to lie or fail, one row each, judged at t0 with the history
// the row gives. Every row that must not be Dead early would be Dead
// early without the rule it shows (the "control" rows).
func TestPlanesDisagree(t *testing.T) {
	const victim = "n3"
	forge := func(since time.Time) func(w *gossipWorld) {
		return func(w *gossipWorld) {
			for _, x := range w.watchers(victim) {
				w.say(x, victim, GossipDead)
				g := w.gossip[x]
				for i := range g.Watches {
					if g.Watches[i].Node == victim {
						g.Watches[i].Since = since
					}
				}
			}
		}
	}
	tests := []struct {
		name     string
		setup    func(w *gossipWorld)
		history  *Distrust
		want     Verdict
		early    bool
		disagree DisagreementReason // on the victim, "" for none
		held     bool               // HeldUntil set
		words    string
	}{
		// Forged Dead votes about a live node (any key holder can forge them).
		{name: "forged quorum of Dead votes, the Lease renewing after they began: disagreement, no action", want: Alive, disagree: WatchersSayDead,
			history: noHold(), setup: forge(ago(5 * time.Second))},
		{name: "a host death's race: Dead votes since after the last renewal, the Lease not stale yet: no disagreement, no hold", want: Alive,
			history: noHold(), setup: forge(ago(500 * time.Millisecond))},
		{name: "forged votes, then the kubelet restarts within the window: held, not Dead", want: Alive, held: true, words: "--gossip-distrust-window",
			history: &Distrust{Since: ago(time.Hour), LastSaid: map[string]time.Time{victim: ago(14 * time.Second)}},
			setup:   func(w *gossipWorld) { forge(time.Time{})(w); w.stale(victim) }},
		{name: "control: the same without the history: Dead early", want: Dead, early: true,
			history: noHold(), setup: func(w *gossipWorld) { forge(time.Time{})(w); w.stale(victim) }},
		{name: "forged votes whose death began before the last renewal: refuted by the Lease, even without history", want: Alive, words: "refuted",
			history: noHold(), setup: func(w *gossipWorld) { forge(ago(time.Minute))(w); w.stale(victim) }},
		{name: "a Dead vote read before the last renewal: abstains", want: Alive, words: "read before it was lost",
			history: noHold(), setup: func(w *gossipWorld) {
				forge(time.Time{})(w)
				w.stale(victim)
				for _, x := range w.watchers(victim) {
					w.gossip[x].ObservedAt = ago(20 * time.Second)
				}
			}},
		{name: "the history's window is over: Dead early again", want: Dead, early: true,
			history: &Distrust{Since: ago(time.Hour), LastSaid: map[string]time.Time{victim: ago(4 * time.Minute)}},
			setup:   func(w *gossipWorld) { forge(time.Time{})(w); w.stale(victim) }},
		// Members down or missing: the plane measures rebound's pod.
		{name: "its member down, its host answering after the loss: no Dead vote, and a live kernel seen first-hand: CutOffFromAPI, no early action", want: CutOffFromAPI, words: "host answering",
			history: noHold(), setup: func(w *gossipWorld) {
				for _, x := range w.watchers(victim) {
					w.say(x, victim, GossipMemberDown)
				}
				w.stale(victim)
			}},
		{name: "its member down while its Lease renews: disagreement MemberDown", want: Alive, disagree: MemberDown,
			history: noHold(), setup: func(w *gossipWorld) {
				w.say(w.watchers(victim)[0], victim, GossipMemberDown)
			}},
		{name: "a node that never ran a member (no read at all): no disagreement, its alert would fire for ever", want: Alive,
			history: noHold(), setup: func(w *gossipWorld) { delete(w.gossip, victim) }},
		{name: "its member's read stale while the others report: disagreement MemberDown", want: Alive, disagree: MemberDown,
			history: noHold(), setup: func(w *gossipWorld) { w.gossip[victim].ObservedAt = ago(10 * time.Minute) }},
		{name: "its member missing and its Lease stale: no disagreement (the planes agree something is wrong)", want: CutOffFromAPI,
			history: noHold(), setup: func(w *gossipWorld) { delete(w.gossip, victim); w.stale(victim) }},
		// A rack dies with its watchers: their last Alive reads are old.
		{name: "Ready, Lease stale, its watchers' last Alive reads from before the loss: they abstain, not CutOffFromAPI", want: Alive, words: "read before it was lost",
			history: noHold(), setup: func(w *gossipWorld) {
				w.stale(victim)
				for _, x := range w.watchers(victim) {
					w.gossip[x].ObservedAt = ago(14 * time.Second)
				}
			}},
		{name: "Ready, Lease stale, an Alive read after the last renewal but before the next was due: abstains", want: Alive,
			history: noHold(), setup: func(w *gossipWorld) {
				w.stale(victim)
				for _, x := range w.watchers(victim) {
					w.gossip[x].ObservedAt = ago(5 * time.Second) // renewed 13 s ago, every 10 s
				}
			}},
		{name: "cut off from the API only: a fresh Alive read after the loss: CutOffFromAPI", want: CutOffFromAPI, words: "alive",
			history: noHold(), setup: func(w *gossipWorld) { w.stale(victim) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			tc.setup(w)
			a := w.assessAt(t0, tc.history, Options{})
			v := a.Of(victim)
			if v.Verdict != tc.want || v.Early != tc.early {
				t.Fatalf("verdict %s (early %v), want %s (early %v): %s", v.Verdict, v.Early, tc.want, tc.early, v.Reason)
			}
			if d := a.Disagreements[victim]; d.Reason != tc.disagree {
				t.Errorf("disagreement %q (%s), want %q", d.Reason, d.Detail, tc.disagree)
			}
			if v.HeldUntil.IsZero() == tc.held {
				t.Errorf("HeldUntil %s, want held %v: %s", v.HeldUntil, tc.held, v.Reason)
			}
			if tc.words != "" && !strings.Contains(v.Reason, tc.words) {
				t.Errorf("reason %q does not say %q", v.Reason, tc.words)
			}
			if a.Hold.Reason != "" {
				t.Errorf("cluster-wide hold %+v in a one-node story", a.Hold)
			}
		})
	}
}

// TestRackDiesWithWatchers: a NotReady node whose watchers died with it:
// their last Alive reads, from before its loss, keep it neither
// CutOffFromAPI nor out of upstream's hands; a watcher that lives and
// reads it Alive after the loss still does.
func TestRackDiesWithWatchers(t *testing.T) {
	const victim = "n3"
	for _, tc := range []struct {
		name   string
		leases bool
		lastAt time.Duration // the watchers' last reads, ago
		want   Verdict
	}{
		{name: "Lease plane: reads before the last renewal", leases: true, lastAt: 30 * time.Second, want: Unknown},
		{name: "no Lease plane: reads before the NotReady transition", lastAt: 2 * time.Minute, want: Unknown},
		{name: "control: a live watcher's read after the transition", lastAt: time.Second, want: CutOffFromAPI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			w.nodes[3] = down(victim, ago(time.Minute))
			w.stale(victim)
			if !tc.leases {
				w.leases = nil
			}
			for _, x := range w.watchers(victim) {
				w.gossip[x].ObservedAt = ago(tc.lastAt)
			}
			if v := w.assessAt(t0, noHold(), Options{}).Of(victim); v.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s: %s", v.Verdict, tc.want, v.Reason)
			}
		})
	}
}

// TestEarlyJudgementHolds: the cluster-wide stops. A process that just
// started knows no history and holds early judgement for one window; and
// more than the share of Ready nodes distrusted at once holds it
// everywhere, until enough of their windows end.
func TestEarlyJudgementHolds(t *testing.T) {
	const victim = "n3"
	deadOnBothPlanes := func(w *gossipWorld) {
		w.stale(victim)
		for _, x := range w.watchers(victim) {
			w.say(x, victim, GossipDead)
		}
	}
	others := func(n int, at time.Duration) map[string]time.Time {
		m := map[string]time.Time{}
		for i := range n {
			m[fmt.Sprintf("n%d", 10+i)] = ago(at)
		}
		return m
	}
	tests := []struct {
		name    string
		history *Distrust
		opts    Options
		hold    string
		until   time.Time
	}{
		{name: "a controller started 10 s ago: held until one window after its start", hold: HoldRestart,
			history: &Distrust{Since: ago(10 * time.Second)}, until: ago(10 * time.Second).Add(DefaultGossipDistrustWindow)},
		{name: "a shorter window (the lab's 15 s): held until then", hold: HoldRestart, opts: Options{GossipDistrustWindow: 15 * time.Second},
			history: &Distrust{Since: ago(10 * time.Second)}, until: ago(10 * time.Second).Add(15 * time.Second)},
		{name: "a window after the start: judged", history: &Distrust{Since: ago(DefaultGossipDistrustWindow + time.Second)}},
		{name: "two of 20 Ready nodes distrusted (max 2): judged", history: &Distrust{Since: ago(time.Hour), LastSaid: others(2, time.Minute)}},
		{name: "three of 20 distrusted: held until the first window ends", hold: HoldShare,
			history: &Distrust{Since: ago(time.Hour), LastSaid: map[string]time.Time{"n10": ago(time.Minute), "n11": ago(2 * time.Minute), "n12": ago(30 * time.Second)}},
			until:   ago(2 * time.Minute).Add(DefaultGossipDistrustWindow)},
		{name: "a share of 0.25 allows five", opts: Options{GossipDistrustShare: 0.25}, history: &Distrust{Since: ago(time.Hour), LastSaid: others(5, time.Minute)}},
		{name: "windows over: judged", history: &Distrust{Since: ago(time.Hour), LastSaid: others(5, 4*time.Minute)}},
		{name: "no history kept (a one-shot reader): judged", history: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(20)
			deadOnBothPlanes(w)
			a := w.assessAt(t0, tc.history, tc.opts)
			v := a.Of(victim)
			if a.Hold.Reason != tc.hold {
				t.Fatalf("hold %q (%+v), want %q", a.Hold.Reason, a.Hold, tc.hold)
			}
			if tc.hold == "" {
				if v.Verdict != Dead || !v.Early {
					t.Fatalf("not held, yet %s (early %v): %s", v.Verdict, v.Early, v.Reason)
				}
				return
			}
			if v.Verdict == Dead || v.Early {
				t.Fatalf("held (%s), yet %s early: %s", a.Hold.Reason, v.Verdict, v.Reason)
			}
			if !a.Hold.Until.Equal(tc.until) || !v.HeldUntil.Equal(tc.until) {
				t.Errorf("held until %s (verdict %s), want %s", a.Hold.Until, v.HeldUntil, tc.until)
			}
			if !strings.Contains(v.Reason, "not judged early until") || !strings.Contains(v.Reason, a.Hold.Detail) {
				t.Errorf("reason does not name the hold: %s", v.Reason)
			}
			if a.StaleAt.IsZero() || a.StaleAt.After(tc.until.Add(time.Second)) {
				t.Errorf("StaleAt %s: not woken when the hold ends at %s", a.StaleAt, tc.until)
			}
		})
	}
}

// TestDistrustTracker: the history survives across passes, ends a window
// after the last disagreement seen, and a new tracker holds for one
// window from its start.
func TestDistrustTracker(t *testing.T) {
	const victim = "n3"
	tr := NewDistrustTracker(ago(time.Hour))
	w := newGossipWorld(7)
	for _, x := range w.watchers(victim) {
		w.say(x, victim, GossipDead)
		g := w.gossip[x]
		for i := range g.Watches {
			if g.Watches[i].Node == victim {
				g.Watches[i].Since = ago(5 * time.Second) // before the renewal seen 1 s ago
			}
		}
	}
	// Pass 0, 5 s ago: the controller sees the watchers' Dead reads.
	tr.SeeReports(w.reports(), ago(5*time.Second))
	// Pass 1: the Lease renews after the watchers said Dead.
	a := w.assessAt(t0, tr.Distrust(t0), Options{})
	if a.Disagreements[victim].Reason != WatchersSayDead {
		t.Fatalf("no disagreement: %+v", a.Disagreements)
	}
	tr.Observe(a, t0)
	// Pass 2, 20 s later: the Lease is stale and the forged votes
	// refreshed, read after it; the history holds.
	later := t0.Add(20 * time.Second)
	for name := range w.leases {
		w.leases[name] = Lease{RenewSeen: later.Add(-time.Second), RenewInterval: 10 * time.Second}
	}
	w.leases[victim] = Lease{RenewSeen: t0.Add(2 * time.Second), RenewInterval: 10 * time.Second}
	for _, x := range w.watchers(victim) {
		w.gossip[x].ObservedAt = later.Add(-time.Second)
		for i := range w.gossip[x].Watches {
			w.gossip[x].Watches[i].Since = time.Time{} // the agent does not say since when
		}
	}
	a = w.assessAt(later, tr.Distrust(t0), Options{})
	tr.Observe(a, later)
	if v := a.Of(victim); v.Verdict == Dead || !v.HeldUntil.Equal(t0.Add(DefaultGossipDistrustWindow)) {
		t.Fatalf("%s held until %s, want held until %s: %s", v.Verdict, v.HeldUntil, t0.Add(DefaultGossipDistrustWindow), v.Reason)
	}
	if _, ok := a.Disagreements[victim]; ok {
		t.Fatal("a stale Lease is no disagreement")
	}
	// Pass 3, past the window: judged again.
	end := t0.Add(DefaultGossipDistrustWindow + time.Second)
	for name := range w.leases {
		if name != victim {
			w.leases[name] = Lease{RenewSeen: end.Add(-time.Second), RenewInterval: 10 * time.Second}
		}
	}
	for _, x := range w.watchers(victim) {
		w.gossip[x].ObservedAt = end.Add(-time.Second)
	}
	if v := w.assessAt(end, tr.Distrust(t0), Options{}).Of(victim); v.Verdict != Dead {
		t.Fatalf("past the window, %s: %s", v.Verdict, v.Reason)
	}
	// Forgotten past the longest window.
	tr.Observe(Assessment{}, t0.Add(MaxGossipDistrustWindow+time.Minute))
	if d := tr.Distrust(t0); len(d.LastSaid) != 0 || !d.Since.Equal(ago(time.Hour)) {
		t.Fatalf("history %+v", d)
	}
	var lazy DistrustTracker // the zero value starts with its first use
	if d := lazy.Distrust(t0); !d.Since.Equal(t0) {
		t.Fatalf("a new tracker's history starts at %s, want its first use %s", d.Since, t0)
	}
	var none *DistrustTracker
	if none.Distrust(t0) != nil {
		t.Fatal("a nil tracker has a history")
	}
}

// TestDistrustOptions: bad values are named by their flag.
func TestDistrustOptions(t *testing.T) {
	for _, o := range []Options{{GossipDistrustWindow: time.Second}, {GossipDistrustWindow: 2 * time.Hour}, {GossipDistrustShare: 0.9}, {GossipDistrustShare: 0.001}} {
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), "--gossip-distrust-") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if err := (Options{GossipDistrustWindow: 15 * time.Second, GossipDistrustShare: 0.2}).Validate(); err != nil {
		t.Error(err)
	}
	for ready, want := range map[int]int{0: 1, 3: 1, 10: 1, 19: 1, 20: 2, 100: 10} {
		if got := MaxDistrusted(ready, DefaultGossipDistrustShare); got != want {
			t.Errorf("MaxDistrusted(%d) = %d, want %d", ready, got, want)
		}
	}
}
