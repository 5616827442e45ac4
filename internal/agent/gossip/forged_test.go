package gossip

import (
	"bytes"
	"context"
	"math"
	"net/netip"
	"testing"
	"time"

	"rebound/internal/lab/gossipforge"
	"rebound/pkg/liveness"
)

// TestForgedSequenceIsNoVote: a key holder forges the sequence that used
// to make a live member's watchers vote it Dead ("X left" at the highest
// incarnation, "X alive at an address where nothing answers", "X dead")
// and sends it to every other member. The alive message is refused (the
// API has X elsewhere); the departure makes each watcher probe X, at the
// API's address, where X answers: its watchers never write it Dead (nor
// MemberDown) and hold it Alive throughout.
//
// Not parallel: a watcher starved of CPU by the other tests' members
// would miss X's answers, which is what a loaded node would do, but not
// what this test is about.
func TestForgedSequenceIsNoVote(t *testing.T) {
	c := newCluster(t)
	c.startMany("forged", addrs(0, 80, 5)...)
	c.converged(15 * time.Second)
	x := c.names[2]
	watchers := liveness.Watchers(x, c.names, liveness.DefaultWatchers)
	before := map[string]int{}
	var to []netip.AddrPort
	for _, n := range c.names {
		before[n] = c.members[n].w.count()
		if n != x {
			to = append(to, c.members[n].Addr())
		}
	}
	// Where nothing answers: the silent host stand-in's address.
	bogus := c.deadHost
	forger := c.names[0]
	if forger == x {
		forger = c.names[1]
	}
	f := gossipforge.Forger{Key: c.key, From: forger}
	if err := f.SendAll(to, gossipforge.ForgedSequence(x, bogus)...); err != nil {
		t.Fatal(err)
	}
	if err := f.Send(c.members[x].Addr(), gossipforge.Left(x, math.MaxUint32)); err != nil {
		t.Fatal(err)
	}
	// The forgery took: each watcher's membership had X gone, and each
	// probed X itself and got its answer (logged once per episode).
	contested := []byte("but it answers this agent's direct probes: no Dead vote\" plane=gossip member=" + x)
	err := pollUntil(context.Background(), 10*time.Second, func() bool {
		return bytes.Count([]byte(c.log.String()), contested) >= len(watchers)
	})
	if err != nil {
		t.Fatalf("the forged departure did not reach the watchers %v of %s: %v\nlog:\n%s", watchers, x, err, c.log)
	}
	// The forged alive at the bogus address was refused.
	refused := uint64(0)
	for _, n := range c.names {
		refused += c.members[n].refused.snapshot()[refusedAddress]
	}
	if refused == 0 {
		t.Errorf("no member refused the forged alive of %s at %s", x, bogus)
	}
	// Several recheck intervals: X stays Alive with every watcher.
	deadline := time.Now().Add(3 * c.members[watchers[0]].recheck)
	for time.Now().Before(deadline) {
		for _, w := range watchers {
			if s := watchOf(c.members[w].Report(), x); s != liveness.GossipAlive {
				t.Fatalf("%s has %s %q after the forgery, want Alive\nlog:\n%s", w, x, s, c.log)
			}
		}
		if err := sleepCtx(context.Background(), 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.names {
		for _, g := range c.members[n].w.since(before[n]) {
			if s := watchOf(g, x); s != "" && s != liveness.GossipAlive {
				t.Errorf("%s wrote %s %s after the forgery", n, x, s)
			}
		}
	}
}

// TestMemberUnknownToTheAPIIsRefusedUntilListed: a member that holds the
// key but that the API does not list is refused by the others (counted),
// and taken in once the API lists it at its address: the book's news
// makes the others exchange state with it.
func TestMemberUnknownToTheAPIIsRefusedUntilListed(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startMany("listed", addrs(0, 90, 3)...)
	c.converged(15 * time.Second)
	cfg := c.config("late", addrs(0, 95, 1)[0], c.key)
	w := &recordingWriter{}
	cfg.Writer = w
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Not in the book yet (c.start would list it).
	m.cfg.Join = []string{c.members[c.names[0]].seed()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	first := c.members[c.names[0]]
	err = pollUntil(context.Background(), 10*time.Second, func() bool {
		return first.refused.snapshot()[refusedUnknown] > 0
	})
	if err != nil {
		t.Fatalf("%s did not refuse a member the API does not list: %v\nlog:\n%s", c.names[0], err, c.log)
	}
	for _, n := range c.names {
		if c.members[n].aliveAt("late", m.Addr()) {
			t.Fatalf("%s took in a member the API does not list", n)
		}
	}
	// Wait until its own announcements have stopped (memberlist
	// retransmits each a few times): from then on only the state exchange
	// the book's news starts takes it in, not a late retransmission.
	refusals := func() (n uint64) {
		for _, x := range c.names {
			n += c.members[x].refused.snapshot()[refusedUnknown]
		}
		return n
	}
	last, stableSince := refusals(), time.Now()
	err = pollUntil(context.Background(), 15*time.Second, func() bool {
		if n := refusals(); n != last {
			last, stableSince = n, time.Now()
		}
		return time.Since(stableSince) > 1500*time.Millisecond
	})
	if err != nil {
		t.Fatalf("the refused member's announcements did not stop: %v", err)
	}
	c.book.SetMember("late", m.Addr())
	c.book.SetHost("late", c.liveHost)
	err = pollUntil(context.Background(), 10*time.Second, func() bool {
		for _, n := range c.names {
			if !c.members[n].aliveAt("late", m.Addr()) {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("the members did not take in the member once the API listed it: %v\nlog:\n%s", err, c.log)
	}
}

// TestStoppedMemberWithALiveHostIsMemberDown: a member stops as in a
// rollout (it leaves the gossip) or a crash (killed, no leave), while its
// host still answers: its watchers write it MemberDown, never Dead; and
// once its host goes silent too, Dead.
func TestStoppedMemberWithALiveHostIsMemberDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		from byte // the members' addresses, 127.0.0.from on
		stop func(*testMember)
	}{
		{"left (a rollout)", 100, func(m *testMember) { m.stop() }},
		{"killed (a crash)", 110, func(m *testMember) { m.kill(); m.stop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.startMany("down", addrs(0, tc.from, 5)...)
			c.converged(15 * time.Second)
			x := c.names[3]
			watchers := liveness.Watchers(x, c.names, liveness.DefaultWatchers)
			before := map[string]int{}
			for _, w := range watchers {
				before[w] = c.members[w].w.count()
			}
			tc.stop(c.members[x])
			err := pollUntil(context.Background(), 15*time.Second, func() bool {
				for _, w := range watchers {
					if last, _ := c.members[w].w.last(); watchOf(last, x) != liveness.GossipMemberDown {
						return false
					}
				}
				return true
			})
			if err != nil {
				t.Fatalf("the watchers %v of the stopped %s did not all write it MemberDown: %v\nlog:\n%s", watchers, x, err, c.log)
			}
			for _, w := range watchers {
				for _, g := range c.members[w].w.since(before[w]) {
					if watchOf(g, x) == liveness.GossipDead {
						t.Errorf("%s wrote the stopped %s Dead while its host answered", w, x)
					}
				}
			}
			// Now the host dies too.
			c.book.SetHost(x, c.deadHost)
			err = pollUntil(context.Background(), 15*time.Second, func() bool {
				for _, w := range watchers {
					if last, _ := c.members[w].w.last(); watchOf(last, x) != liveness.GossipDead {
						return false
					}
				}
				return true
			})
			if err != nil {
				t.Fatalf("the watchers %v did not write %s Dead once its host was silent: %v", watchers, x, err)
			}
		})
	}
}
