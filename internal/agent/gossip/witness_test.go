package gossip

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// renewInterval is the kubelet's default (a 40 s Lease, renewed every
// quarter of it).
const renewInterval = 10 * time.Second

// leasesAt is a Lease plane at now: the nodes in lost last renewed well
// past the renew interval plus the margin, every other node in all one
// second ago; the nodes in unknown have no Lease.
func leasesAt(now time.Time, all, lost, unknown []string) map[string]liveness.Lease {
	out := map[string]liveness.Lease{}
	for _, n := range all {
		switch {
		case slices.Contains(unknown, n):
		case slices.Contains(lost, n):
			out[n] = liveness.Lease{RenewSeen: now.Add(-renewInterval - liveness.DefaultLeaseMargin - time.Second), RenewInterval: renewInterval}
		default:
			out[n] = liveness.Lease{RenewSeen: now.Add(-time.Second), RenewInterval: renewInterval}
		}
	}
	return out
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// agentsOf builds every node's tracker, each with every other member
// alive, sees the Lease plane and returns them by node.
func agentsOf(all []string, leases map[string]liveness.Lease, now time.Time) map[string]*tracker {
	book := bookOf(all...)
	out := make(map[string]*tracker, len(all))
	for _, self := range all {
		tr := newTracker(book, self, liveness.DefaultWatchers, 10*time.Minute, 2*time.Second)
		for _, o := range all {
			tr.alive(o, t0)
		}
		tr.leasesSeen(leases, now)
		tr.update(now)
		out[self] = tr
	}
	return out
}

// witnessTargets are the nodes self's tracker has a witness probe due
// for at now.
func witnessTargets(tr *tracker, now time.Time) []string {
	var out []string
	for _, p := range tr.due(now) {
		if p.witness {
			if !p.confirm {
				panic("a first witness probe that does not confirm")
			}
			out = append(out, p.node)
		}
	}
	return out
}

// TestWitnessSelection: who probes a node the Lease plane lost, computed by
// every agent from its own view; checked against the rule written out
// with liveness's ring: the first k members after the node's k ring
// watchers whose own Lease renews.
func TestWitnessSelection(t *testing.T) {
	k := liveness.DefaultWatchers
	for _, tc := range []struct {
		name    string
		all     []string
		lost    []string
		unknown []string
		// wantPerLost is how many witnesses each lost node has, beyond
		// its ring watchers.
		wantPerLost int
		// maxPerAgent bounds the lost nodes one agent witnesses.
		maxPerAgent int
	}{
		{name: "many reach the API: k witnesses per lost node beyond its ring watchers", all: names("node", 20), lost: []string{"node-3", "node-11"}, wantPerLost: k, maxPerAgent: 2},
		{name: "S16: only node-0 reaches the API: it witnesses every lost node it does not ring-watch", all: names("node", 6), lost: []string{"node-1", "node-2", "node-3", "node-4", "node-5"}, wantPerLost: -1, maxPerAgent: 5},
		{name: "100 nodes, 90 lost: k witnesses each among the 10 that renew", all: names("node", 100), lost: names("node", 90), wantPerLost: k, maxPerAgent: 90},
		{name: "1,000 nodes, 100 lost: k witnesses each, a few per agent", all: names("node", 1000), lost: names("node", 100), wantPerLost: k, maxPerAgent: 10},
		{name: "a node with no Lease is not lost, and witnesses nobody", all: names("node", 20), lost: []string{"node-3"}, unknown: []string{"node-7", "node-9"}, wantPerLost: k, maxPerAgent: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(time.Minute)
			leases := leasesAt(now, tc.all, tc.lost, tc.unknown)
			agents := agentsOf(tc.all, leases, now)
			renews := func(n string) bool { return !slices.Contains(tc.lost, n) && !slices.Contains(tc.unknown, n) }
			witnessedBy := map[string][]string{}
			for self, tr := range agents {
				targets := witnessTargets(tr, now)
				if !renews(self) && len(targets) > 0 {
					t.Errorf("%s, whose own Lease is stale or unknown, witnesses %v: it is cut off itself or cannot tell", self, targets)
				}
				if len(targets) > tc.maxPerAgent {
					t.Errorf("%s witnesses %d lost nodes, want at most %d", self, len(targets), tc.maxPerAgent)
				}
				for _, n := range targets {
					if !slices.Contains(tc.lost, n) {
						t.Errorf("%s witnesses %s, whose Lease renews", self, n)
					}
					witnessedBy[n] = append(witnessedBy[n], self)
				}
			}
			for _, l := range tc.lost {
				ring := liveness.Watchers(l, tc.all, len(tc.all))
				watchers := ring[:k]
				var want []string
				for _, n := range ring[k:] {
					if renews(n) && len(want) < k {
						want = append(want, n)
					}
				}
				got := witnessedBy[l]
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("%s (ring watchers %v) is witnessed by %v, want %v", l, watchers, got, want)
				}
				if tc.wantPerLost >= 0 && len(got) != tc.wantPerLost {
					t.Errorf("%s has %d witnesses, want %d", l, len(got), tc.wantPerLost)
				}
				// Whoever reaches the API reads the node: a ring
				// watcher or a witness, up to k of each.
				var readers []string
				for _, n := range watchers {
					if renews(n) {
						readers = append(readers, n)
					}
				}
				readers = append(readers, got...)
				var reach int
				for _, n := range tc.all {
					if renews(n) && n != l {
						reach++
					}
				}
				if wantReaders := min(reach, 2*k); len(readers) < min(reach, k) || len(readers) > wantReaders {
					t.Errorf("%s is read by %v among those that reach the API: want at least %d, at most %d", l, readers, min(reach, k), wantReaders)
				}
			}
			if tc.wantPerLost < 0 {
				// S16: node-0 alone reads every lost node, as a ring
				// watcher or as a witness.
				tr := agents["node-0"]
				for _, l := range tc.lost {
					if tr.watches[l] == nil && tr.witnesses[l] == nil {
						t.Errorf("node-0, the only node that reaches the API, neither watches nor witnesses %s", l)
					}
				}
			}
		})
	}
}

// TestWitnessRule drives one witness through a loss, in the style of
// TestTrackerRule: what it reports of the lost node after each step.
func TestWitnessRule(t *testing.T) {
	all := names("node", 12)
	at := func(s int) time.Time { return t0.Add(time.Minute + time.Duration(s)*time.Second) }
	// The lost node and one of its witnesses, from the rule.
	lost := "node-4"
	ring := liveness.Watchers(lost, all, len(all))
	self := ring[liveness.DefaultWatchers]
	type step struct {
		do    func(tr *tracker)
		state string // "" means not reported
		since time.Time
	}
	see := func(s int, lostNodes ...string) func(*tracker) {
		return func(tr *tracker) { tr.leasesSeen(leasesAt(at(s), all, lostNodes, nil), at(s)); tr.update(at(s)) }
	}
	probe := func(s int, r probeResult) func(*tracker) {
		return func(tr *tracker) {
			due := tr.due(at(s))
			i := slices.IndexFunc(due, func(p probeTarget) bool { return p.node == lost })
			if i < 0 || !due[i].witness {
				t.Fatalf("at +%ds no witness probe of %s due: %+v", s, lost, due)
			}
			tr.probedWitness(lost, r, at(s))
		}
	}
	noProbe := func(s int) func(*tracker) {
		return func(tr *tracker) {
			if slices.ContainsFunc(tr.due(at(s)), func(p probeTarget) bool { return p.node == lost }) {
				t.Fatalf("at +%ds a probe of %s is due", s, lost)
			}
		}
	}
	membershipDead := func(s int) func(*tracker) { return func(tr *tracker) { tr.dead(lost, at(s)) } }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"Lease renews: no witness probe, nothing reported", []step{
			{see(0), "", time.Time{}},
			{noProbe(0), "", time.Time{}},
		}},
		{"Lease stale, the member answers: Alive, whatever the membership says", []step{
			{see(0, lost), "", time.Time{}},
			{probe(0, memberAnswered), liveness.GossipAlive, at(0)},
			{probe(2, memberAnswered), liveness.GossipAlive, at(0)},
			{membershipDead(3), liveness.GossipAlive, at(0)},
			{probe(4, memberAnswered), liveness.GossipAlive, at(0)},
		}},
		{"a departure in the membership brings the next witness probe forward", []step{
			{see(0, lost), "", time.Time{}},
			{probe(0, memberAnswered), liveness.GossipAlive, at(0)},
			{noProbe(1), liveness.GossipAlive, at(0)},
			{membershipDead(1), liveness.GossipAlive, at(0)},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
		}},
		{"Lease stale, member and host silent: Dead since the first silence", []step{
			{see(0, lost), "", time.Time{}},
			{probe(0, hostSilent), liveness.GossipDead, at(0)},
			{probe(2, hostSilent), liveness.GossipDead, at(0)},
		}},
		{"Lease stale, the member silent, its host answers: MemberDown", []step{
			{see(0, lost), "", time.Time{}},
			{probe(0, hostAnswered), liveness.GossipMemberDown, at(0)},
			{probe(2, memberAnswered), liveness.GossipAlive, at(2)},
		}},
		{"Lease stale, host not probeable: unknown, not reported", []step{
			{see(0, lost), "", time.Time{}},
			{probe(0, hostUnknown), "", time.Time{}},
		}},
		{"the Lease renews again: the node leaves the witness list", []step{
			{see(0, lost), "", time.Time{}},
			{probe(0, memberAnswered), liveness.GossipAlive, at(0)},
			{see(1), "", time.Time{}},
			{noProbe(5), "", time.Time{}},
		}},
		{"the witness's own Lease goes stale: it witnesses nobody", []step{
			{see(0, lost), "", time.Time{}},
			{probe(0, memberAnswered), liveness.GossipAlive, at(0)},
			{see(1, lost, self), "", time.Time{}},
			{noProbe(5), "", time.Time{}},
		}},
		{"the witness's own Lease is unknown: it witnesses nobody", []step{
			{func(tr *tracker) {
				l := leasesAt(at(0), all, []string{lost}, []string{self})
				tr.leasesSeen(l, at(0))
				tr.update(at(0))
			}, "", time.Time{}},
			{noProbe(0), "", time.Time{}},
		}},
		{"no member address in the book: no probe, unknown", []step{
			{func(tr *tracker) { tr.book.(*StaticBook).SetMember(lost, netip.AddrPort{}) }, "", time.Time{}},
			{see(0, lost), "", time.Time{}},
			{noProbe(0), "", time.Time{}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(bookOf(all...), self, liveness.DefaultWatchers, 10*time.Minute, 2*time.Second)
			for _, o := range all {
				tr.alive(o, t0)
			}
			tr.update(t0)
			if tr.watches[lost] != nil {
				t.Fatalf("%s ring-watches %s: the test needs a witness", self, lost)
			}
			for i, s := range tc.steps {
				s.do(tr)
				w, ok := stateOf(tr, lost)
				if s.state == "" {
					if ok {
						t.Fatalf("step %d: %s is reported %+v, want not reported", i, lost, w)
					}
					continue
				}
				if !ok || w.State != s.state || !w.Since.Equal(s.since) {
					t.Fatalf("step %d: %s is %+v (reported %v), want %s since %s", i, lost, w, ok, s.state, s.since)
				}
			}
		})
	}
}

// TestLossRewritesAnAliveRingWatch: a member this agent ring-watches and
// has Alive from the membership gets one direct probe when its Lease goes
// stale; if it answers, the read is written again, so that the controller
// has an Alive read from after the loss; if not (it may have died, and
// the membership not know yet), nothing, and it is probed again a recheck
// interval later while it stays lost. Never for a member it has Dead.
func TestLossRewritesAnAliveRingWatch(t *testing.T) {
	all := names("node", 8)
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		answers probeResult
		rewrite bool
	}{
		{"the member answers: rewritten", memberAnswered, true},
		{"member and host silent: no rewrite, no vote", hostSilent, false},
		{"member silent, host answers: no rewrite", hostAnswered, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, target := ringOf(t, "node-0", all[1:]...)
			seen := func(at time.Time, lost ...string) []probeTarget {
				tr.leasesSeen(leasesAt(at, all, lost, nil), at)
				tr.update(at)
				return tr.due(at)
			}
			if due := seen(now); len(due) != 0 || tr.takeRewrite() {
				t.Fatalf("every Lease renewing: probes %v, or a rewrite", due)
			}
			due := seen(now.Add(time.Second), target)
			if len(due) != 1 || due[0].node != target || !due[0].confirm || due[0].witness {
				t.Fatalf("%s, watched Alive, lost its Lease: probes due %+v, want one confirming ring probe of it", target, due)
			}
			if tr.takeRewrite() {
				t.Fatal("a rewrite before the member answered")
			}
			tr.probed(target, tc.answers, now.Add(time.Second))
			if got := tr.takeRewrite(); got != tc.rewrite {
				t.Fatalf("rewrite %v, want %v", got, tc.rewrite)
			}
			if w, _ := stateOf(tr, target); w.State != liveness.GossipAlive || !w.Since.Equal(t0) {
				t.Errorf("%s is %+v after the loss probe, want Alive since %s: the membership has it alive", target, w, t0)
			}
			// Still lost: answered once is enough; unanswered is probed
			// again a recheck interval later, until it answers.
			due = seen(now.Add(3*time.Second), target)
			if tr.takeRewrite() {
				t.Fatalf("%s still lost: a second rewrite", target)
			}
			if wantRetry := !tc.rewrite; (len(due) == 1 && due[0].node == target) != wantRetry || len(due) > 1 {
				t.Fatalf("%s still lost: probes %v, want a retry %v", target, due, wantRetry)
			}
			if !tc.rewrite {
				tr.probed(target, memberAnswered, now.Add(3*time.Second))
				if !tr.takeRewrite() {
					t.Fatalf("%s answered the retry: no rewrite", target)
				}
				if due := seen(now.Add(6*time.Second), target); len(due) != 0 {
					t.Fatalf("%s answered: probes %v, want none while it stays lost", target, due)
				}
			}
		})
	}
	t.Run("a member watched Dead that loses its Lease gets no loss probe", func(t *testing.T) {
		tr, target := ringOf(t, "node-0", all[1:]...)
		tr.dead(target, now)
		tr.probed(target, hostSilent, now)
		tr.leasesSeen(leasesAt(now.Add(time.Second), all, []string{target}, nil), now.Add(time.Second))
		tr.update(now.Add(time.Second))
		if w := tr.watches[target]; w.lossProbe {
			t.Error("a loss probe of a member watched Dead")
		}
		if tr.takeRewrite() {
			t.Error("a rewrite for a member watched Dead")
		}
	})
}

func TestWriteDue(t *testing.T) {
	const debounce, refresh = time.Second, time.Minute
	for _, tc := range []struct {
		name    string
		age     time.Duration // since the last write; -1: never written
		changed bool
		write   bool
		wait    time.Duration
	}{
		{"never written", -1, false, true, 0},
		{"a change long after the last write is written at once", 30 * time.Second, true, true, 0},
		{"a change right after a write waits for the debounce", 300 * time.Millisecond, true, false, 700 * time.Millisecond},
		{"a change exactly a debounce after", time.Second, true, true, 0},
		{"no change: wait for the refresh", 10 * time.Second, false, false, 50 * time.Second},
		{"no change, refresh due", time.Minute, false, true, 0},
	} {
		now := t0.Add(time.Hour)
		last := now.Add(-tc.age)
		if tc.age < 0 {
			last = time.Time{}
		}
		write, wait := writeDue(now, last, tc.changed, debounce, refresh)
		if write != tc.write || (!write && wait != tc.wait) {
			t.Errorf("%s: write %v wait %v, want %v %v", tc.name, write, wait, tc.write, tc.wait)
		}
	}
}

// leaseFunc is a LeaseSource.
type leaseFunc func() map[string]liveness.Lease

func (f leaseFunc) Leases() map[string]liveness.Lease { return f() }

// TestWitnessReadWrittenWithinSeconds runs a member's watch steps and its
// write loop with a fake writer: once a node's Lease goes stale, the
// witness's Alive read of it is written within seconds, not at the next
// report interval (an hour here), and probes that change nothing ask for
// no write.
func TestWitnessReadWrittenWithinSeconds(t *testing.T) {
	all := names("node", 12)
	lost := "node-4"
	ring := liveness.Watchers(lost, all, len(all))
	self := ring[liveness.DefaultWatchers]
	others := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == self })
	book := bookOf(all...)
	fp := &fakeProber{}
	member, _ := book.Member(lost)
	fp.setAnswer(member.String(), true)
	var (
		mu        sync.Mutex
		lostNodes []string
	)
	m := testMemberOf(book, fp, &fakeHost{})
	m.cfg.NodeName = self
	m.t = newTracker(book, self, liveness.DefaultWatchers, 10*time.Minute, 0)
	m.cfg.ReportInterval = time.Hour
	w := &recordingWriter{}
	m.cfg.Writer = w
	m.cfg.Leases = leaseFunc(func() map[string]liveness.Lease {
		mu.Lock()
		defer mu.Unlock()
		return leasesAt(time.Now(), all, lostNodes, nil)
	})
	for _, o := range others {
		m.t.alive(o, time.Now())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.writeLoop(ctx) }()
	defer cancel()

	m.step(ctx)
	if err := pollUntil(ctx, 5*time.Second, func() bool { return w.count() == 1 }); err != nil {
		t.Fatalf("the first read (this member joined) was not written: %v", err)
	}
	mu.Lock()
	lostNodes = []string{lost}
	mu.Unlock()
	lossSeen := time.Now()
	m.step(ctx)
	if err := pollUntil(ctx, 5*time.Second, func() bool {
		last, ok := w.last()
		if !ok {
			return false
		}
		watch, ok := last.Of(lost)
		return ok && watch.State == liveness.GossipAlive
	}); err != nil {
		t.Fatalf("the witness read of %s was not written within 5 s: %v", lost, err)
	}
	last, _ := w.last()
	if d := last.ObservedAt.Sub(lossSeen); d > 2*time.Second {
		t.Errorf("the witness read was written %s after the loss was seen, want within the debounce (%s)", d, m.cfg.WriteDebounce)
	}
	if n := w.count(); n != 2 {
		t.Errorf("%d writes, want 2: the first read and the witness read", n)
	}
	// Probes that find the same ask for no write: the loop is stopped,
	// and the steps leave its wake-up channel empty.
	cancel()
	<-done
	select {
	case <-m.wantWrite:
	default:
	}
	for range 3 {
		m.step(context.Background())
	}
	select {
	case <-m.wantWrite:
		t.Error("probes that changed nothing asked for a write")
	default:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if fp.attempts[lost] < 4 {
		t.Errorf("%d probes of %s, want one per step", fp.attempts[lost], lost)
	}
}

// TestWitnessesThatReachedTheAPIAfterTheLoss: the nodes cut off in the
// same second as a lost node still look renewing until their own Leases
// go stale, up to a renew interval later, and may be the first k after
// its ring watchers; they cannot write. The first k that renewed after
// the lost node's missed renewal witness it too, from the moment the loss
// is seen.
func TestWitnessesThatReachedTheAPIAfterTheLoss(t *testing.T) {
	k := liveness.DefaultWatchers
	all := names("node", 16)
	now := t0.Add(time.Minute)
	lost := "node-5"
	ring := liveness.Watchers(lost, all, len(all))
	cutOff := ring[k : 2*k]     // renewed last before the miss: not stale yet
	reaching := ring[2*k : 3*k] // renewed since
	leases := leasesAt(now, all, []string{lost}, nil)
	for _, n := range cutOff {
		leases[n] = liveness.Lease{RenewSeen: now.Add(-5 * time.Second), RenewInterval: renewInterval}
	}
	agents := agentsOf(all, leases, now)
	var got []string
	for self, tr := range agents {
		if slices.Contains(witnessTargets(tr, now), lost) {
			got = append(got, self)
		}
	}
	want := append(slices.Clone(cutOff), reaching...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s is witnessed by %v, want %v: the first %d after its ring watchers (%v, cut off with it) and the first %d that renewed after its loss (%v)", lost, got, want, k, cutOff, k, reaching)
	}
}
