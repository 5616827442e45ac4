package gossip

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// The tests below run real memberlist members on loopback addresses
// (127.0.0.x, any free port, so that they can run beside anything else
// on the machine), with the agent's timings.

func testKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// syncBuffer is a log destination tests read while members write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testMember struct {
	*Member
	w      *recordingWriter
	cancel context.CancelFunc
	done   chan struct{}
}

type cluster struct {
	t   *testing.T
	key []byte
	// book is the API's addresses, shared by the members: each member's,
	// and a host for each that accepts (liveHost) or drops (deadHost).
	book               *StaticBook
	liveHost, deadHost netip.AddrPort
	log                *syncBuffer
	members            map[string]*testMember
	names              []string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, key: testKey(t), log: &syncBuffer{}, members: map[string]*testMember{}, book: NewStaticBook()}
	live, closeLive, err := acceptingHost(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLive)
	dead, closeDead, err := silentHost(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDead)
	c.liveHost, c.deadHost = live, dead
	return c
}

func (c *cluster) config(name string, addr netip.Addr, key []byte) Config {
	return Config{
		NodeName: name, BindAddr: addr, Key: key, Join: []string{"127.0.0.1"},
		// No refreshes: every write a test sees is one a change caused.
		ReportInterval: time.Hour,
		RetryInterval:  100 * time.Millisecond, MaxRetryInterval: time.Second,
		Logger:  slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Book:    c.book,
		anyPort: true,
	}
}

// start creates and runs a member that joins through the seeds.
func (c *cluster) start(cfg Config, seeds ...string) *testMember {
	c.t.Helper()
	w := &recordingWriter{}
	cfg.Writer = w
	m, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(seeds) > 0 {
		m.cfg.Join = seeds
	}
	c.book.SetMember(cfg.NodeName, m.Addr())
	c.book.SetHost(cfg.NodeName, c.liveHost)
	ctx, cancel := context.WithCancel(context.Background())
	tm := &testMember{Member: m, w: w, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		_ = m.Run(ctx)
	}()
	c.t.Cleanup(tm.stop)
	return tm
}

func (tm *testMember) stop() {
	tm.cancel()
	<-tm.done
}

func (tm *testMember) seed() string {
	return net.JoinHostPort(tm.cfg.BindAddr.String(), strconv.Itoa(tm.Port()))
}

// startMany starts one member per address, each joining through the
// first.
func (c *cluster) startMany(prefix string, addrs ...netip.Addr) {
	c.t.Helper()
	var first string
	for i, a := range addrs {
		name := fmt.Sprintf("%s-%d", prefix, i)
		var tm *testMember
		if i == 0 {
			tm = c.start(c.config(name, a, c.key))
			first = tm.seed()
		} else {
			tm = c.start(c.config(name, a, c.key), first)
		}
		c.members[name] = tm
		c.names = append(c.names, name)
	}
}

// converged waits until every member has every other alive and has
// written its watches, all Alive.
func (c *cluster) converged(within time.Duration) {
	c.t.Helper()
	k := liveness.DefaultWatchers
	err := pollUntil(context.Background(), within, func() bool {
		for _, n := range c.names {
			m := c.members[n]
			if m.ml.NumMembers() != len(c.names) {
				return false
			}
			last, ok := m.w.last()
			if !ok || len(last.Watches) != min(k, len(c.names)-1) {
				return false
			}
			for _, w := range last.Watches {
				if w.State != liveness.GossipAlive {
					return false
				}
			}
			// Nothing left to write: no change waits for the debounce.
			if !sameWatches(last.Watches, m.Report0().Watches) {
				return false
			}
		}
		return true
	})
	if err != nil {
		for _, n := range c.names {
			m := c.members[n]
			last, _ := m.w.last()
			c.t.Logf("%s: %d members, last write %+v", n, m.ml.NumMembers(), last)
		}
		c.t.Fatalf("the members did not converge: %v\nlog:\n%s", err, c.log)
	}
}

func addrs(third, from byte, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, 0, third, from + byte(i)})
	}
	return out
}

func watchOf(g liveness.GossipReport, node string) string {
	w, _ := g.Of(node)
	return w.State
}

// TestKilledMemberIsWrittenDeadByItsWatchersOnly: five members; one is
// killed (shut down without leaving, as SIGKILL would). Exactly its
// watchers write it Dead, within a bound; nobody else writes anything;
// the writes are O(k). It then comes back on its address and is written
// Alive again.
func TestKilledMemberIsWrittenDeadByItsWatchersOnly(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startMany("node", addrs(0, 10, 5)...)
	c.converged(15 * time.Second)

	const k = liveness.DefaultWatchers
	victim := c.names[2]
	watchers := liveness.Watchers(victim, c.names, k)
	before := map[string]int{}
	for _, n := range c.names {
		before[n] = c.members[n].w.count()
	}
	v := c.members[victim]
	addr, port := v.cfg.BindAddr, v.Port()
	killed := time.Now()
	v.kill()
	v.stop()
	// Its host dies with it: silent, as a machine without power.
	c.book.SetHost(victim, c.deadHost)

	// A verdict within a few seconds on a LAN: memberlist's suspicion
	// (about 1.5 to 3 s at five members) and this agent's own probes
	// (under a second). The bound has ample slack for a loaded machine.
	const bound = 12 * time.Second
	err := pollUntil(context.Background(), bound, func() bool {
		for _, w := range watchers {
			if last, _ := c.members[w].w.last(); watchOf(last, victim) != liveness.GossipDead {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("the watchers %v of %s did not all write it Dead within %s: %v\nlog:\n%s", watchers, victim, bound, err, c.log)
	}
	t.Logf("%s written Dead by all of its watchers %v %s after the kill", victim, watchers, time.Since(killed).Round(time.Millisecond))

	// Give every agent time to write anything it would (four recheck
	// intervals), then count.
	if err := sleepCtx(context.Background(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range c.names {
		if n == victim {
			continue
		}
		writes := c.members[n].w.since(before[n])
		total += len(writes)
		if !slices.Contains(watchers, n) {
			for _, g := range writes {
				t.Errorf("%s, not a watcher of %s, wrote after its death: %+v", n, victim, g)
			}
			continue
		}
		for _, g := range writes {
			if _, ok := g.Of(victim); !ok {
				t.Errorf("watcher %s wrote a read without %s: %+v", n, victim, g)
			}
		}
	}
	if total > 2*k+2 {
		t.Errorf("%d writes for one death, want at most 2k+2 = %d", total, 2*k+2)
	}

	// It comes back, on the same address: its watchers write it Alive,
	// since after its death.
	cfg := c.config(victim, addr, c.key)
	cfg.BindPort, cfg.anyPort = port, false
	back := time.Now()
	c.members[victim] = c.start(cfg, c.members[c.names[0]].seed()) // its host answers again
	err = pollUntil(context.Background(), bound, func() bool {
		for _, w := range watchers {
			last, _ := c.members[w].w.last()
			if s, _ := last.Of(victim); s.State != liveness.GossipAlive || s.Since.Before(killed) {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("the watchers %v of the returning %s did not write it Alive within %s: %v\nlog:\n%s", watchers, victim, bound, err, c.log)
	}
	t.Logf("%s written Alive again %s after it restarted", victim, time.Since(back).Round(time.Millisecond))
}

// TestMemberWithoutTheKeyCannotJoin: a member with another key reaches
// the others' port but no message of its decrypts: it never joins, no
// member ever has it, and it never writes a vote.
func TestMemberWithoutTheKeyCannotJoin(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startMany("good", addrs(0, 20, 3)...)
	c.converged(15 * time.Second)
	cfg := c.config("intruder", netip.AddrFrom4([4]byte{127, 0, 0, 23}), testKey(t))
	ilog := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(ilog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	intruder := c.start(cfg, c.members[c.names[0]].seed())
	// Wait until it has tried to join several times, and been refused.
	err := pollUntil(context.Background(), 10*time.Second, func() bool {
		return bytes.Count([]byte(ilog.String()), []byte("gossip: no other member reached yet, retrying")) >= 3
	})
	if err != nil {
		t.Fatalf("the intruder did not try to join: %v\nlog:\n%s", err, ilog)
	}
	t.Logf("the intruder's log:\n%s", ilog)
	if n := intruder.ml.NumMembers(); n != 1 {
		t.Errorf("the intruder has %d members, want itself alone", n)
	}
	if n := intruder.w.count(); n != 0 {
		t.Errorf("the intruder wrote %d reads: a member that never joined has nobody to vote on", n)
	}
	for _, n := range c.names {
		m := c.members[n]
		for _, node := range m.ml.Members() {
			if node.Name == "intruder" {
				t.Errorf("%s lists the intruder", n)
			}
		}
		m.mu.Lock()
		_, seen := m.t.members["intruder"]
		m.mu.Unlock()
		if seen {
			t.Errorf("%s saw the intruder alive at some point", n)
		}
		if last, _ := m.w.last(); last.Members != len(c.names) {
			t.Errorf("%s counts %d members, want %d", n, last.Members, len(c.names))
		}
	}
}

// TestMembershipDeathOfALiveMemberIsNoVote: the membership declares a
// member gone while it still answers probes. memberlist's Leave does
// exactly that: the member broadcasts its own death and never refutes it,
// but keeps answering pings. Every watcher has it Left in its membership,
// probes it itself, gets an answer, and never writes Dead.
//
// Not parallel: a watcher starved of CPU by the other tests' members
// would miss the answers, which is what a loaded node would do, but not
// what this test is about.
func TestMembershipDeathOfALiveMemberIsNoVote(t *testing.T) {
	c := newCluster(t)
	c.startMany("peer", addrs(0, 30, 4)...)
	c.converged(15 * time.Second)
	target := c.names[1]
	watchers := liveness.Watchers(target, c.names, liveness.DefaultWatchers)
	before := map[string]int{}
	for _, w := range watchers {
		before[w] = c.members[w].w.count()
	}
	if err := c.members[target].ml.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	// Each watcher logs the contested death once, after its own probe.
	contested := []byte("but it answers this agent's direct probes: no Dead vote\" plane=gossip member=" + target)
	err := pollUntil(context.Background(), 10*time.Second, func() bool {
		return bytes.Count([]byte(c.log.String()), contested) == len(watchers)
	})
	if err != nil {
		t.Fatalf("the watchers %v did not all probe %s themselves: %v\nlog:\n%s", watchers, target, err, c.log)
	}
	for _, w := range watchers {
		for _, n := range c.members[w].ml.Members() {
			if n.Name == target {
				t.Fatalf("%s's membership still has %s alive: the test made no false death", w, target)
			}
		}
	}
	// Two more rechecks: still no vote while it answers.
	if err := sleepCtx(context.Background(), 2*c.members[watchers[0]].recheck); err != nil {
		t.Fatal(err)
	}
	for _, w := range watchers {
		for _, g := range c.members[w].w.since(before[w]) {
			if watchOf(g, target) == liveness.GossipDead {
				t.Errorf("%s voted Dead for the live %s on membership state alone: %+v", w, target, g)
			}
		}
		if s := watchOf(c.members[w].Report(), target); s != liveness.GossipAlive {
			t.Errorf("%s has %s %q, want Alive", w, target, s)
		}
	}
}

func TestWriteFailuresAreRetried(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start(c.config("retry-a", netip.AddrFrom4([4]byte{127, 0, 0, 40}), c.key))
	a.w.mu.Lock()
	a.w.fail = fmt.Errorf("apiserver unavailable")
	a.w.mu.Unlock()
	c.start(c.config("retry-b", netip.AddrFrom4([4]byte{127, 0, 0, 41}), c.key), a.seed())
	err := pollUntil(context.Background(), 10*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.stats.writeFailures >= 2
	})
	if err != nil {
		t.Fatalf("no retried write: %v\nlog:\n%s", err, c.log)
	}
	a.w.mu.Lock()
	a.w.fail = nil
	a.w.mu.Unlock()
	err = pollUntil(context.Background(), 10*time.Second, func() bool {
		last, ok := a.w.last()
		return ok && watchOf(last, "retry-b") == liveness.GossipAlive
	})
	if err != nil {
		t.Fatalf("the read was not written once the writer works again: %v", err)
	}
}
