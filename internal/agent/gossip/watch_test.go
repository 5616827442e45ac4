package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"rebound/pkg/liveness"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// bookOf is the API's addresses of the nodes: member i at 10.0.0.(i+2)
// port 7946, its host at the same address, port 10250.
func bookOf(nodes ...string) *StaticBook {
	b := NewStaticBook()
	for i, n := range nodes {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 2)})
		b.SetMember(n, netip.AddrPortFrom(ip, 7946))
		b.SetHost(n, netip.AddrPortFrom(ip, 10250))
	}
	return b
}

// ringOf returns a tracker for self with the members alive, and the
// member self watches first.
func ringOf(t *testing.T, self string, others ...string) (*tracker, string) {
	t.Helper()
	tr := newTracker(bookOf(others...), self, 3, 10*time.Minute, 2*time.Second)
	for _, o := range others {
		tr.alive(o, t0)
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
		return func(tr *tracker, n string) { tr.alive(n, at(s)) }
	}
	noMemberAddress := func(tr *tracker, n string) { tr.book.(*StaticBook).SetMember(n, netip.AddrPort{}) }
	noProbeDue := func(s int) func(*tracker, string) {
		return func(tr *tracker, n string) {
			if due := tr.due(at(s)); slices.ContainsFunc(due, func(p probeTarget) bool { return p.node == n }) {
				t.Fatalf("at +%ds a probe of %s is due with no address in the book: %v", s, n, due)
			}
		}
	}
	probe := func(s int, answered probeResult) func(*tracker, string) {
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
			{probe(1, memberAnswered), liveness.GossipAlive, t0},
			// Probed again at the recheck interval, and still no vote
			// while it answers.
			{probe(3, memberAnswered), liveness.GossipAlive, t0},
		}},
		{"relayed death, member and host silent is Dead", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
			{probe(3, hostSilent), liveness.GossipDead, at(1)},
		}},
		{"member silent, host answers (accepts or refuses) is MemberDown, no vote", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostAnswered), liveness.GossipMemberDown, at(1)},
			{probe(3, hostAnswered), liveness.GossipMemberDown, at(1)},
		}},
		{"a member that left (a rollout) with its host answering is MemberDown, never Dead", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostAnswered), liveness.GossipMemberDown, at(1)},
			{probe(3, hostAnswered), liveness.GossipMemberDown, at(1)},
			{membershipAlive(5), liveness.GossipAlive, at(5)},
		}},
		{"member silent, host not probeable (no host address) is unknown, not reported", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostUnknown), "", at(1)},
			{probe(3, hostUnknown), "", at(1)},
		}},
		{"no member address in the book: no probe, unknown", []step{
			{noMemberAddress, liveness.GossipAlive, t0},
			{membershipDead(1), liveness.GossipAlive, t0},
			{noProbeDue(1), "", at(1)},
			{noProbeDue(5), "", at(1)},
		}},
		{"a Dead member with no member address left becomes unknown", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
			{noMemberAddress, liveness.GossipDead, at(1)},
			{noProbeDue(3), "", at(3)},
		}},
		{"a contested death whose member later goes silent with its host is Dead", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, memberAnswered), liveness.GossipAlive, t0},
			{probe(3, hostSilent), liveness.GossipDead, at(3)},
		}},
		{"re-probes: Dead, host back is MemberDown, member back is Alive", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
			{probe(3, hostAnswered), liveness.GossipMemberDown, at(3)},
			{probe(5, memberAnswered), liveness.GossipAlive, at(5)},
		}},
		{"re-probes: MemberDown whose host goes silent is Dead", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostAnswered), liveness.GossipMemberDown, at(1)},
			{probe(3, hostSilent), liveness.GossipDead, at(3)},
		}},
		{"re-probes: a Dead member that answers is Alive again", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
			{probe(3, memberAnswered), liveness.GossipAlive, at(3)},
		}},
		{"re-probes: a Dead member whose host can no longer be probed is unknown", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
			{probe(3, hostUnknown), "", at(3)},
		}},
		{"a Dead member the membership has alive again is Alive", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
			{membershipAlive(2), liveness.GossipAlive, at(2)},
		}},
		{"a second death after a return through the membership is a new episode, Dead since its own silence", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{probe(1, hostSilent), liveness.GossipDead, at(1)},
			// The node comes back: its member rejoins (no probe answers).
			{membershipAlive(40), liveness.GossipAlive, at(40)},
			// It dies again: the Dead vote is of this death, not of the
			// first (which would put it before the renewals the Lease made
			// in between, a lie to the controller).
			{membershipDead(80), liveness.GossipAlive, at(40)},
			{probe(80, hostSilent), liveness.GossipDead, at(80)},
		}},
		{"a failed probe after the member came back says nothing", []step{
			{membershipDead(1), liveness.GossipAlive, t0},
			{func(tr *tracker, n string) {
				due := tr.due(at(1)) // the probe starts ...
				tr.alive(n, at(2))
				tr.probed(due[0].node, hostSilent, at(3)) // ... and fails after the rejoin
			}, liveness.GossipAlive, t0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, target := ringOf(t, "node-a", others...)
			for i, s := range tc.steps {
				s.do(tr, target)
				w, ok := stateOf(tr, target)
				if s.state == "" {
					if ok {
						t.Fatalf("step %d: %s is reported %+v, want unknown (not reported)", i, target, w)
					}
					continue
				}
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
	tr.probed(target, hostSilent, t0)
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
	tr.probed(target, hostSilent, t0)
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
	all := []string{"node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h"}
	tr := newTracker(bookOf(all...), "node-a", 2, 10*time.Minute, 2*time.Second)
	for _, n := range all {
		tr.alive(n, t0)
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
	tr.probed(next[0], hostSilent, now)
	tr.probed(next[1], memberAnswered, now)
	if w, _ := stateOf(tr, next[0]); w.State != liveness.GossipDead {
		t.Errorf("%s unanswered: %+v, want Dead", next[0], w)
	}
	if w, _ := stateOf(tr, next[1]); w.State != liveness.GossipAlive {
		t.Errorf("%s answered: %+v, want Alive", next[1], w)
	}
}

// fakeProber answers pings at the addresses in answerAt, and records
// every ping's address and every state exchange.
type fakeProber struct {
	mu       sync.Mutex
	answerAt map[string]bool // by address
	attempts map[string]int  // by node
	pinged   map[string][]string
	joins    []string
}

func (f *fakeProber) setAnswer(addr string, answer bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answerAt == nil {
		f.answerAt = map[string]bool{}
	}
	f.answerAt[addr] = answer
}

func (f *fakeProber) Join(addrs []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins = append(f.joins, addrs...)
	return len(addrs), nil
}

func (f *fakeProber) Ping(node string, addr net.Addr) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attempts == nil {
		f.attempts, f.pinged = map[string]int{}, map[string][]string{}
	}
	f.attempts[node]++
	f.pinged[node] = append(f.pinged[node], addr.String())
	if f.answerAt[addr.String()] {
		return time.Millisecond, nil
	}
	return 0, errors.New("no ack")
}

// fakeHost answers host probes from a table, and records them.
type fakeHost struct {
	mu     sync.Mutex
	answer map[netip.AddrPort]HostAnswer
	probed []netip.AddrPort
}

func (f *fakeHost) ProbeHost(_ context.Context, a netip.AddrPort) HostAnswer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probed = append(f.probed, a)
	return f.answer[a]
}

// testMemberOf is a Member without memberlist: its events, its alive
// delegate and its watch loop, with fake probers and a static book of
// others (bookOf's addresses).
func testMemberOf(book *StaticBook, fp *fakeProber, fh *fakeHost) *Member {
	return &Member{
		cfg:       Config{NodeName: "node-a", ProbeInterval: 500 * time.Millisecond}.WithDefaults(),
		log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		prober:    fp,
		host:      fh,
		book:      book,
		kick:      make(chan struct{}, 1),
		wantWrite: make(chan struct{}, 1),
		learned:   make(chan string, 16),
		t:         newTracker(book, "node-a", 3, 10*time.Minute, 0),
	}
}

// TestMemberVotes drives the member's watch loop (membership events, the
// alive delegate, member pings and host probes, without a network)
// through each case of the rule. Every probe goes to the book's
// addresses, whatever the membership says.
func TestMemberVotes(t *testing.T) {
	others := []string{"node-b", "node-c", "node-d", "node-e"}
	target := liveness.Watched("node-a", others, 3)[0]
	i := slices.Index(others, target)
	bookMember := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 2)}), 7946)
	bookHost := netip.AddrPortFrom(bookMember.Addr(), 10250)
	bogus := &memberlist.Node{Name: target, Addr: net.IPv4(192, 0, 2, 99), Port: 7946}
	for _, tc := range []struct {
		name string
		// memberAnswers: the member answers at the book's address;
		// bogusAnswers: something answers at the forged address.
		memberAnswers, bogusAnswers bool
		host                        HostAnswer
		noHostAddr                  bool
		leave                       bool // a graceful leave instead of a death
		want                        string
		wantHostProbes              int
	}{
		{name: "forged: the membership has it dead at a bogus address where nothing answers; the member answers at the book's", memberAnswers: true, want: liveness.GossipAlive},
		{name: "forged: something answers at the bogus address, the member and its host are gone", bogusAnswers: true, host: HostSilent, want: liveness.GossipDead, wantHostProbes: 1},
		{name: "member down, host refuses the connection", host: HostAnswers, want: liveness.GossipMemberDown, wantHostProbes: 1},
		{name: "member down, host accepts the connection", host: HostAnswers, want: liveness.GossipMemberDown, wantHostProbes: 1},
		{name: "member left gracefully (a rollout), host answers", leave: true, host: HostAnswers, want: liveness.GossipMemberDown, wantHostProbes: 1},
		{name: "member and host silent", host: HostSilent, want: liveness.GossipDead, wantHostProbes: 1},
		{name: "member silent, no host address: no vote", noHostAddr: true, want: ""},
		{name: "member silent, host probe learned nothing: no vote", host: HostUnknown, want: "", wantHostProbes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			book := bookOf(others...)
			if tc.noHostAddr {
				book.SetHost(target, netip.AddrPort{})
			}
			fp := &fakeProber{}
			fp.setAnswer(bookMember.String(), tc.memberAnswers)
			fp.setAnswer("192.0.2.99:7946", tc.bogusAnswers)
			fh := &fakeHost{answer: map[netip.AddrPort]HostAnswer{bookHost: tc.host}}
			m := testMemberOf(book, fp, fh)
			ev := (*events)(m)
			for j, o := range others {
				ev.NotifyJoin(&memberlist.Node{Name: o, Addr: net.IPv4(10, 0, 0, byte(j+2)), Port: 7946})
			}
			ctx := context.Background()
			m.step(ctx)
			// The forger's "alive at a bogus address" is refused ...
			if err := (*aliveDelegate)(m).NotifyAlive(bogus); err == nil {
				t.Fatal("the alive delegate took the member at an address the API does not hold")
			}
			// ... and its "dead" (or a real death, or a leave) only
			// triggers probes.
			if tc.leave {
				ev.NotifyLeave(&memberlist.Node{Name: target, Addr: bogus.Addr, Port: 7946, State: memberlist.StateLeft})
			} else {
				ev.NotifyLeave(bogus)
			}
			m.step(ctx)
			m.bg.Wait()
			g := m.Report0()
			w, ok := g.Of(target)
			if tc.want == "" {
				if ok {
					t.Fatalf("%s reported %+v, want no vote (not reported)", target, w)
				}
			} else if !ok || w.State != tc.want {
				t.Fatalf("%s is %+v (%v), want %s", target, w, ok, tc.want)
			}
			for _, a := range fp.pinged[target] {
				if a != bookMember.String() {
					t.Errorf("pinged %s at %s: probes go to the book's address %s only", target, a, bookMember)
				}
			}
			if wantPings := DefaultProbeAttempts; !tc.memberAnswers && fp.attempts[target] != wantPings {
				t.Errorf("%d pings of the silent member, want %d before the host is probed", fp.attempts[target], wantPings)
			}
			if len(fh.probed) != tc.wantHostProbes {
				t.Errorf("host probes %v, want %d", fh.probed, tc.wantHostProbes)
			}
			for _, a := range fh.probed {
				if a != bookHost {
					t.Errorf("host probed at %s, want the book's %s", a, bookHost)
				}
			}
		})
	}
}

// TestAliveDelegate: the book decides who is a member, and where.
func TestAliveDelegate(t *testing.T) {
	book := bookOf("node-b")
	m := testMemberOf(book, &fakeProber{}, &fakeHost{})
	d := (*aliveDelegate)(m)
	for _, tc := range []struct {
		name string
		node *memberlist.Node
		ok   bool
	}{
		{"known at the book's address", &memberlist.Node{Name: "node-b", Addr: net.IPv4(10, 0, 0, 2), Port: 7946}, true},
		{"known at the book's address, IPv4 in IPv6 form", &memberlist.Node{Name: "node-b", Addr: net.IPv4(10, 0, 0, 2).To16(), Port: 7946}, true},
		{"known, another address", &memberlist.Node{Name: "node-b", Addr: net.IPv4(10, 0, 0, 66), Port: 7946}, false},
		{"known, another port", &memberlist.Node{Name: "node-b", Addr: net.IPv4(10, 0, 0, 2), Port: 7947}, false},
		{"unknown to the API", &memberlist.Node{Name: "node-x", Addr: net.IPv4(10, 0, 0, 9), Port: 7946}, false},
		{"self, not in the book", &memberlist.Node{Name: "node-a", Addr: net.IPv4(127, 0, 0, 1), Port: 1}, true},
	} {
		if err := d.NotifyAlive(tc.node); (err == nil) != tc.ok {
			t.Errorf("%s: NotifyAlive = %v, want accepted %v", tc.name, err, tc.ok)
		}
	}
	if got := m.refused.snapshot(); got[refusedAddress] != 2 || got[refusedUnknown] != 1 {
		t.Errorf("refusals %v, want 2 %s and 1 %s", got, refusedAddress, refusedUnknown)
	}
	// Rate-limited: one line per node per refusalLogEvery.
	var r refusals
	if log, _ := r.add("n", refusedUnknown, t0); !log {
		t.Error("the first refusal is not logged")
	}
	if log, _ := r.add("n", refusedUnknown, t0.Add(time.Second)); log {
		t.Error("a second refusal within the interval is logged")
	}
	if log, suppressed := r.add("n", refusedUnknown, t0.Add(refusalLogEvery+time.Second)); !log || suppressed != 1 {
		t.Errorf("after the interval: log %v, suppressed %d; want true, 1", log, suppressed)
	}
}

// TestMemberFalseDeathNoVote drives the member's watch loop through a
// death memberlist relays for a member that still answers this agent: no
// Dead vote, ever, and one state exchange with it; and through a real
// one (member and host silent), voted after DefaultProbeAttempts silent
// pings and one silent host probe.
func TestMemberFalseDeathNoVote(t *testing.T) {
	others := []string{"node-b", "node-c", "node-d", "node-e"}
	book := bookOf(others...)
	target := liveness.Watched("node-a", others, 3)[0]
	memberAt := fmt.Sprintf("10.0.0.%d:7946", slices.Index(others, target)+2)
	hostAt := netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:10250", slices.Index(others, target)+2))
	fp := &fakeProber{}
	fp.setAnswer(memberAt, true)
	fh := &fakeHost{answer: map[netip.AddrPort]HostAnswer{hostAt: HostSilent}}
	m := testMemberOf(book, fp, fh)
	ev := (*events)(m)
	for i, o := range others {
		ev.NotifyJoin(&memberlist.Node{Name: o, Addr: net.IPv4(10, 0, 0, byte(i+2)), Port: 7946})
	}
	ctx := context.Background()
	m.step(ctx)
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
	if want := []string{memberAt}; !slices.Equal(fp.joins, want) {
		t.Errorf("state exchanges %v, want one with the contested member at the book's address, %v", fp.joins, want)
	}

	// Now it is silent, and so is its host.
	fp.setAnswer(memberAt, false)
	fp.attempts[target] = 0
	m.step(ctx)
	check(liveness.GossipDead)
	if fp.attempts[target] != DefaultProbeAttempts {
		t.Errorf("Dead after %d probes, want %d", fp.attempts[target], DefaultProbeAttempts)
	}
	if m.stats.probeFailures != DefaultProbeAttempts {
		t.Errorf("probe failures %d, want %d", m.stats.probeFailures, DefaultProbeAttempts)
	}
	if len(fh.probed) != 1 {
		t.Errorf("host probes %v, want one", fh.probed)
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
