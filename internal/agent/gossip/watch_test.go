package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"rebound/pkg/liveness"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func udp(last byte) net.Addr { return &net.UDPAddr{IP: net.IPv4(10, 0, 0, last), Port: 7946} }

// ringOf returns a tracker for self with the members alive, and the
// member self watches first.
func ringOf(t *testing.T, self string, others ...string) (*tracker, string) {
	t.Helper()
	tr := newTracker(self, 3, 10*time.Minute, 2*time.Second)
	for i, o := range others {
		tr.alive(o, udp(byte(i+2)), t0)
	}
	tr.update(t0)
	watched := liveness.Watched(self, others, 3)
	if len(watched) != 3 {
		t.Fatalf("watched %v, want 3", watched)
	}
	return tr, watched[0]
}

func stateOf(tr *tracker, node string) (liveness.Watch, bool) {
	g := liveness.GossipReport{Watches: tr.report()}
	return g.Of(node)
}

func TestTrackerRule(t *testing.T) {
	others := []string{"node-b", "node-c", "node-d", "node-e", "node-f"}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step struct {
		do    func(tr *tracker, target string)
		state string // "" means not reported
		since time.Time
	}
	membershipDead := func(s int) func(*tracker, string) { return func(tr *tracker, n string) { tr.dead(n, at(s)) } }
	membershipAlive := func(s int) func(*tracker, string) {
		return func(tr *tracker, n string) { tr.alive(n, udp(9), at(s)) }
	}
	probe := func(s int, answered bool) func(*tracker, string) {
		return func(tr *tracker, n string) {
			due := tr.due(at(s))
			if !slices.ContainsFunc(due, func(p probeTarget) bool { return p.node == n }) {
				t.Fatalf("at +%ds no probe of %s due: %v", s, n, due)
			}
			tr.probed(n, answered, at(s))
		}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"alive in the membership is Alive since first seen", []step{
			{func(*tracker, string) {}, liveness.GossipAlive, t0},
		}},
		{"relayed death answered by a direct probe is no vote", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, true), liveness.GossipAlive, t0},
			// Probed again at the recheck interval, and still no vote
			// while it answers.
			{probe(3, true), liveness.GossipAlive, t0},
		}},
		{"relayed death and unanswered probes is Dead", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, false), liveness.GossipDead, at(1)},
			{probe(3, false), liveness.GossipDead, at(1)},
		}},
		{"a contested death whose member later goes silent is Dead", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, true), liveness.GossipAlive, t0},
			{probe(3, false), liveness.GossipDead, at(3)},
		}},
		{"a Dead member that answers a re-probe is Alive again", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, false), liveness.GossipDead, at(1)},
			{probe(3, true), liveness.GossipAlive, at(3)},
		}},
		{"a Dead member the membership has alive again is Alive", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, false), liveness.GossipDead, at(1)},
			{membershipAlive(2), liveness.GossipAlive, at(2)},
		}},
		{"a failed probe after the member came back says nothing", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{func(tr *tracker, n string) {
				due := tr.due(at(1)) // the probe starts ...
				tr.alive(n, udp(9), at(2))
				tr.probed(due[0].node, false, at(3)) // ... and fails after the rejoin
			}, liveness.GossipAlive, t0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, target := ringOf(t, "node-a", others...)
			for i, s := range tc.steps {
				s.do(tr, target)
				w, ok := stateOf(tr, target)
				if !ok || w.State != s.state || !w.Since.Equal(s.since) {
					t.Fatalf("step %d: %s is %+v (reported %v), want %s since %s", i, target, w, ok, s.state, s.since)
				}
			}
		})
	}
}

func TestTrackerNoProbeWhileAlive(t *testing.T) {
	tr, _ := ringOf(t, "node-a", "node-b", "node-c", "node-d", "node-e")
	if due := tr.due(t0.Add(time.Hour)); len(due) != 0 {
		t.Errorf("members the membership has alive need no direct probe, due: %v", due)
	}
}

func TestTrackerConfirmsDeathWithSeveralAttempts(t *testing.T) {
	tr, target := ringOf(t, "node-a", "node-b", "node-c", "node-d", "node-e")
	tr.dead(target, t0)
	if due := tr.due(t0); len(due) != 1 || !due[0].confirm {
		t.Fatalf("due %+v: want one confirming probe of %s", due, target)
	}
	tr.probed(target, false, t0)
	if due := tr.due(t0.Add(2 * time.Second)); len(due) != 1 || due[0].confirm {
		t.Fatalf("due %+v: want one re-probe of the Dead %s, no confirmation", due, target)
	}
}

func TestTrackerIgnoresMembersNeverSeenAlive(t *testing.T) {
	tr, _ := ringOf(t, "node-a", "node-b", "node-c", "node-d")
	tr.dead("stranger", t0)
	tr.update(t0)
	if _, ok := tr.members["stranger"]; ok {
		t.Error("a member this agent never saw alive was taken on its ring")
	}
}

func TestTrackerRingKeepsTheDeadForTheRetention(t *testing.T) {
	others := []string{"node-b", "node-c", "node-d", "node-e", "node-f", "node-g"}
	tr, target := ringOf(t, "node-a", others...)
	tr.dead(target, t0)
	tr.probed(target, false, t0)
	tr.update(t0.Add(9 * time.Minute))
	if w, ok := stateOf(tr, target); !ok || w.State != liveness.GossipDead {
		t.Fatalf("within the retention the dead member stays watched and Dead, got %+v %v", w, ok)
	}
	tr.update(t0.Add(11 * time.Minute))
	if _, ok := stateOf(tr, target); ok {
		t.Fatal("past the retention the dead member is still watched")
	}
	rest := slices.DeleteFunc(slices.Clone(others), func(s string) bool { return s == target })
	var got []string
	for _, w := range tr.report() {
		got = append(got, w.Node)
	}
	if want := liveness.Watched("node-a", rest, 3); !slices.Equal(got, want) {
		t.Errorf("watched %v, want %v: the ring without the forgotten member", got, want)
	}
}

func TestTrackerNewWatchOfADeadMemberIsUnknownUntilProbed(t *testing.T) {
	// The members node-a watches are forgotten after their retention;
	// the next ones on the ring, dead later and so still retained, enter
	// its watch list with no probe of its own yet: unknown, not reported,
	// until one is made.
	tr := newTracker("node-a", 2, 10*time.Minute, 2*time.Second)
	all := []string{"node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h"}
	for i, n := range all {
		tr.alive(n, udp(byte(i+2)), t0)
	}
	tr.update(t0)
	first := liveness.Watched("node-a", all, 2)
	next := liveness.Watched("node-a", slices.DeleteFunc(slices.Clone(all), func(s string) bool { return slices.Contains(first, s) }), 2)
	for _, n := range first {
		tr.dead(n, t0)
	}
	for _, n := range next {
		tr.dead(n, t0.Add(5*time.Minute))
	}
	now := t0.Add(11 * time.Minute)
	tr.update(now)
	due := tr.due(now)
	for _, n := range next {
		if w, ok := stateOf(tr, n); ok {
			t.Errorf("%s entered the watch list dead and is reported %+v before any probe of this agent", n, w)
		}
		if !slices.ContainsFunc(due, func(p probeTarget) bool { return p.node == n && p.confirm }) {
			t.Errorf("no confirming probe of %s due: %+v", n, due)
		}
	}
	tr.probed(next[0], false, now)
	tr.probed(next[1], true, now)
	if w, _ := stateOf(tr, next[0]); w.State != liveness.GossipDead {
		t.Errorf("%s unanswered: %+v, want Dead", next[0], w)
	}
	if w, _ := stateOf(tr, next[1]); w.State != liveness.GossipAlive {
		t.Errorf("%s answered: %+v, want Alive", next[1], w)
	}
}

// fakeProber answers or not, and counts the attempts and the state
// exchanges.
type fakeProber struct {
	mu       sync.Mutex
	answer   bool
	attempts map[string]int
	joins    []string
}

func (f *fakeProber) Join(addrs []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins = append(f.joins, addrs...)
	return len(addrs), nil
}

func (f *fakeProber) Ping(node string, _ net.Addr) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attempts == nil {
		f.attempts = map[string]int{}
	}
	f.attempts[node]++
	if f.answer {
		return time.Millisecond, nil
	}
	return 0, errors.New("no ack")
}

// TestMemberFalseDeathNoVote drives the member's watch loop (events and
// probes, without a network) through a death memberlist relays for a
// member that still answers this agent: no Dead vote, ever; and through
// a real one, which is voted after DefaultProbeAttempts silent probes.
func TestMemberFalseDeathNoVote(t *testing.T) {
	fp := &fakeProber{answer: true}
	m := &Member{
		cfg:       Config{NodeName: "node-a", ProbeInterval: 500 * time.Millisecond}.WithDefaults(),
		log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		prober:    fp,
		kick:      make(chan struct{}, 1),
		wantWrite: make(chan struct{}, 1),
		t:         newTracker("node-a", 3, 10*time.Minute, 0),
	}
	others := []string{"node-b", "node-c", "node-d", "node-e"}
	ev := (*events)(m)
	for i, o := range others {
		ev.NotifyJoin(&memberlist.Node{Name: o, Addr: net.IPv4(10, 0, 0, byte(i+2)), Port: 7946})
	}
	ctx := context.Background()
	m.step(ctx)
	target := liveness.Watched("node-a", others, 3)[0]
	check := func(want string) {
		t.Helper()
		g := m.Report0()
		w, ok := g.Of(target)
		if !ok || w.State != want {
			t.Fatalf("%s is %+v (%v), want %s", target, w, ok, want)
		}
	}
	check(liveness.GossipAlive)

	// memberlist says dead (a relayed broadcast), the member answers.
	ev.NotifyLeave(&memberlist.Node{Name: target, Addr: net.IPv4(10, 0, 0, 9), Port: 7946})
	for range 3 {
		m.step(ctx)
		check(liveness.GossipAlive)
	}
	if fp.attempts[target] != 3 {
		t.Errorf("%d direct probes of %s, want one per step while the membership has it dead", fp.attempts[target], target)
	}
	m.bg.Wait()
	if want := []string{fmt.Sprintf("10.0.0.%d:7946", slices.Index(others, target)+2)}; !slices.Equal(fp.joins, want) {
		t.Errorf("state exchanges %v, want one with the contested member, %v", fp.joins, want)
	}

	// Now it is silent.
	fp.answer = false
	fp.attempts[target] = 0
	m.step(ctx)
	check(liveness.GossipDead)
	if fp.attempts[target] != DefaultProbeAttempts {
		t.Errorf("Dead after %d probes, want %d", fp.attempts[target], DefaultProbeAttempts)
	}
	if m.stats.probeFailures != DefaultProbeAttempts {
		t.Errorf("probe failures %d, want %d", m.stats.probeFailures, DefaultProbeAttempts)
	}
}

// Report0 is Report without memberlist, for the tests that run none.
func (m *Member) Report0() liveness.GossipReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return liveness.GossipReport{Watches: m.watches}
}

func TestAntiEntropyIntervalKeepsThePerAgentCostFlat(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, time.Minute}, {30, time.Minute}, {32, time.Minute}, {64, 2 * time.Minute}, {1000, 31*time.Minute + 15*time.Second}} {
		if got := antiEntropyInterval(tc.n); got != tc.want {
			t.Errorf("%d members: %v, want %v", tc.n, got, tc.want)
		}
		// The bytes of one exchange grow with n: per second, the same at
		// every size past the scale.
		if tc.n >= antiEntropyScale {
			if perSecond := float64(tc.n) / antiEntropyInterval(tc.n).Seconds(); perSecond < 0.53 || perSecond > 0.54 {
				t.Errorf("%d members: %.3f member states per second, want 32/60", tc.n, perSecond)
			}
		}
	}
}
