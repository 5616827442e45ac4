package gossipforge

import (
	"bytes"
	"fmt"
	"log"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// recorder is a member's event, alive and conflict delegate: it records
// what memberlist tells a delegate, which is all rebound's agent sees.
type recorder struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	kind string // join, update, leave (event delegate), alive (alive delegate), conflict
	node string
	addr netip.AddrPort
}

func nodeAddrPort(n *memberlist.Node) netip.AddrPort {
	a, _ := netip.AddrFromSlice(n.Addr)
	return netip.AddrPortFrom(a.Unmap(), n.Port)
}

func (r *recorder) add(kind string, n *memberlist.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{kind: kind, node: n.Name, addr: nodeAddrPort(n)})
}

func (r *recorder) NotifyJoin(n *memberlist.Node)   { r.add("join", n) }
func (r *recorder) NotifyUpdate(n *memberlist.Node) { r.add("update", n) }
func (r *recorder) NotifyLeave(n *memberlist.Node)  { r.add("leave", n) }
func (r *recorder) NotifyAlive(n *memberlist.Node) error {
	r.add("alive", n)
	return nil
}
func (r *recorder) NotifyConflict(_, other *memberlist.Node) { r.add("conflict", other) }

// about returns the events about node recorded since mark.
func (r *recorder) about(node string, mark int) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event
	for _, e := range r.events[mark:] {
		if e.node == node {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

type member struct {
	name string
	addr netip.AddrPort
	ml   *memberlist.Memberlist
	rec  *recorder
}

// syncBuffer collects memberlist's log, shown when a test fails.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startCluster starts n real memberlist members on 127.0.0.(base+i), any
// free port, configured as rebound's agent configures its member (a
// secret key verified both ways, no label, no compression, no
// memberlist-driven push/pull), with fast timings, and waits until every
// member sees all n alive.
func startCluster(t *testing.T, key []byte, base, n int) []*member {
	t.Helper()
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("memberlist log:\n%s", logs.String())
		}
	})
	var members []*member
	for i := range n {
		rec := &recorder{}
		c := memberlist.DefaultLANConfig()
		c.Name = fmt.Sprintf("node-%d", i)
		c.BindAddr = fmt.Sprintf("127.0.0.%d", base+i)
		c.AdvertiseAddr = c.BindAddr
		c.BindPort, c.AdvertisePort = 0, 0
		c.SecretKey = key
		c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
		c.ProbeInterval = 200 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.GossipInterval = 50 * time.Millisecond
		c.SuspicionMult, c.SuspicionMaxTimeoutMult = 3, 2
		c.PushPullInterval = 0
		c.GossipToTheDeadTime = 60 * time.Second
		c.DeadNodeReclaimTime = 30 * time.Second
		c.TCPTimeout = 3 * time.Second
		c.EnableCompression = false
		c.Events, c.Alive, c.Conflict = rec, rec, rec
		c.Logger = log.New(logs, c.Name+" ", log.Lmicroseconds)
		ml, err := memberlist.Create(c)
		if err != nil {
			t.Fatalf("start member %s: %v", c.Name, err)
		}
		t.Cleanup(func() { _ = ml.Shutdown() })
		m := &member{name: c.Name, addr: nodeAddrPort(ml.LocalNode()), ml: ml, rec: rec}
		if i > 0 {
			if _, err := ml.Join([]string{members[0].addr.String()}); err != nil {
				t.Fatalf("%s joins %s: %v", m.name, members[0].addr, err)
			}
		}
		members = append(members, m)
	}
	poll(t, 10*time.Second, "all members see each other alive", func() string {
		for _, m := range members {
			if got := m.ml.NumMembers(); got != n {
				return fmt.Sprintf("%s sees %d alive members, want %d", m.name, got, n)
			}
		}
		return ""
	})
	return members
}

// poll calls check until it returns "" or the deadline passes; check
// says what is still missing.
func poll(t *testing.T, within time.Duration, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		missing := check()
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, not yet %s: %s", within, what, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// silentAddr returns a loopback UDP address where a socket is bound but
// never reads: probes sent there are neither answered nor refused.
func silentAddr(t *testing.T, ip string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
	if err != nil {
		t.Fatalf("bind the silent address: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func alive(m *member, node string) (netip.AddrPort, bool) {
	for _, n := range m.ml.Members() {
		if n.Name == node {
			return nodeAddrPort(n), true
		}
	}
	return netip.AddrPort{}, false
}

var testKey = []byte("rebound-test-key") // 16 bytes: AES-128

// TestForgedSequence: a key holder sends the forged sequence about a live
// member X to the others. Every other member then holds X dead at the
// bogus address, and keeps it so after X's own refutation has reached it,
// while X still runs and answers pings at its real address.
func TestForgedSequence(t *testing.T) {
	members := startCluster(t, testKey, 31, 4)
	x, others := members[0], members[1:]
	bogus := silentAddr(t, "127.0.0.39")
	marks := make([]int, len(others))
	for i, o := range others {
		marks[i] = o.rec.mark()
	}

	f := Forger{Key: testKey, From: others[0].name}
	seq := ForgedSequence(x.name, bogus)
	var to []netip.AddrPort
	for _, o := range others {
		to = append(to, o.addr)
	}
	if err := f.SendAll(to, seq...); err != nil {
		t.Fatal(err)
	}

	// X may hear its forged departure from the others' gossip, but only
	// if one gossips to its real address before the sequence moves it to
	// the bogus one. Telling X itself makes its refutation certain: an
	// alive message at its real address, which reaches each other
	// member's alive delegate, and changes nothing there.
	if err := f.Send(x.addr, Left(x.name, math.MaxUint32)); err != nil {
		t.Fatalf("send to %s: %v", x.name, err)
	}
	poll(t, 10*time.Second, "every other member holds X dead at the bogus address after X's refutation", func() string {
		for i, o := range others {
			if a, ok := alive(o, x.name); ok {
				return fmt.Sprintf("%s holds %s alive at %s", o.name, x.name, a)
			}
			evs := o.rec.about(x.name, marks[i])
			var last *event
			refuted := false
			for j, e := range evs {
				switch e.kind {
				case "join", "leave":
					last = &evs[j]
				case "alive", "conflict":
					refuted = refuted || e.addr == x.addr
				}
			}
			if last == nil || last.kind != "leave" || last.addr != bogus {
				return fmt.Sprintf("%s's last event about %s is %+v, want leave at %s (events %+v)", o.name, x.name, last, bogus, evs)
			}
			if !refuted {
				return fmt.Sprintf("%s has not heard %s's refutation yet (events %+v)", o.name, x.name, evs)
			}
		}
		return ""
	})

	// Each other member saw, through its event delegate, X leave at its
	// real address, join at the bogus one, and die there.
	for i, o := range others {
		var got []string
		for _, e := range o.rec.about(x.name, marks[i]) {
			if e.kind == "join" || e.kind == "leave" {
				got = append(got, e.kind+"@"+e.addr.String())
			}
		}
		want := []string{"leave@" + x.addr.String(), "join@" + bogus.String(), "leave@" + bogus.String()}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s's event delegate saw %v about %s, want %v", o.name, got, x.name, want)
		}
		if a, ok := alive(o, x.name); ok {
			t.Errorf("%s holds %s alive at %s after the refutation", o.name, x.name, a)
		}
	}

	// X is alive: it sees every member alive, and answers a direct ping
	// at its real address.
	if got := x.ml.NumMembers(); got != len(members) {
		t.Errorf("%s sees %d alive members, want %d: it should be unaffected", x.name, got, len(members))
	}
	if _, err := others[1].ml.Ping(x.name, net.UDPAddrFromAddrPort(x.addr)); err != nil {
		t.Errorf("%s does not answer a ping at its real address %s: %v", x.name, x.addr, err)
	}
}

// TestRefutationWraps: after "X left" with incarnation math.MaxUint32, X's
// refutation carries an incarnation that wrapped past 0, and every other
// member ignores it: X stays Left at its own address, though it runs.
func TestRefutationWraps(t *testing.T) {
	members := startCluster(t, testKey, 41, 3)
	x, others := members[0], members[1:]
	marks := make([]int, len(others))
	for i, o := range others {
		marks[i] = o.rec.mark()
	}
	f := Forger{Key: testKey, From: others[0].name}
	for _, m := range members {
		if err := f.Send(m.addr, Left(x.name, math.MaxUint32)); err != nil {
			t.Fatalf("send to %s: %v", m.name, err)
		}
	}
	poll(t, 10*time.Second, "every other member holds X left and has heard its refutation", func() string {
		for i, o := range others {
			if a, ok := alive(o, x.name); ok {
				return fmt.Sprintf("%s holds %s alive at %s", o.name, x.name, a)
			}
			heard := false
			for _, e := range o.rec.about(x.name, marks[i]) {
				heard = heard || (e.kind == "alive" && e.addr == x.addr)
			}
			if !heard {
				return fmt.Sprintf("%s has not heard %s's refutation yet", o.name, x.name)
			}
		}
		return ""
	})
	for i, o := range others {
		for _, e := range o.rec.about(x.name, marks[i]) {
			if e.kind == "join" {
				t.Errorf("%s took %s back (%+v): the refutation should have wrapped and been ignored", o.name, x.name, e)
			}
		}
	}
	if got := x.ml.NumMembers(); got != len(members) {
		t.Errorf("%s sees %d alive members, want %d", x.name, got, len(members))
	}
}

// TestWrongKeyRejected: the same sequence under another key changes
// nothing. A canary sent afterwards under the right key proves the
// members have read (and dropped) the forged packets: a member reads its
// UDP packets in order and drops undecryptable ones before any state
// change.
func TestWrongKeyRejected(t *testing.T) {
	members := startCluster(t, testKey, 51, 3)
	x, others := members[0], members[1:]
	bogus := silentAddr(t, "127.0.0.59")
	canaryAddr := silentAddr(t, "127.0.0.58")
	marks := make([]int, len(others))
	for i, o := range others {
		marks[i] = o.rec.mark()
	}
	wrong := Forger{Key: []byte("not-the-rightkey"), From: others[0].name}
	right := Forger{Key: testKey, From: others[0].name}
	for _, o := range others {
		if err := wrong.Send(o.addr, ForgedSequence(x.name, bogus)...); err != nil {
			t.Fatalf("send to %s: %v", o.name, err)
		}
		if err := right.Send(o.addr, Alive("canary", 1, canaryAddr)); err != nil {
			t.Fatalf("send the canary to %s: %v", o.name, err)
		}
	}
	poll(t, 10*time.Second, "every other member has the canary", func() string {
		for i, o := range others {
			if len(o.rec.about("canary", marks[i])) == 0 {
				return o.name + " has not heard of the canary"
			}
		}
		return ""
	})
	for i, o := range others {
		// Alive messages about X at its real address are the
		// membership's own gossip; anything else came from the forger.
		for _, e := range o.rec.about(x.name, marks[i]) {
			if e.kind != "alive" || e.addr != x.addr {
				t.Errorf("%s saw %s of %s at %s from packets under the wrong key", o.name, e.kind, x.name, e.addr)
			}
		}
		if a, ok := alive(o, x.name); !ok || a != x.addr {
			t.Errorf("%s holds %s at %v (alive %v), want alive at %s", o.name, x.name, a, ok, x.addr)
		}
	}
}

// TestSendRejectsBadInput: mistakes are reported, naming the field.
func TestSendRejectsBadInput(t *testing.T) {
	to := netip.MustParseAddrPort("127.0.0.1:9")
	for _, tc := range []struct {
		name string
		f    Forger
		to   netip.AddrPort
		msg  Message
		want string
	}{
		{"short key", Forger{Key: []byte("short"), From: "a"}, to, Dead("x", 1), "Forger.Key is 5 bytes"},
		{"no sender", Forger{Key: testKey}, to, Dead("x", 1), "Forger.From is empty"},
		{"no sender for suspect", Forger{Key: testKey}, to, Suspect("x", 1), "Forger.From is empty"},
		{"no destination", Forger{Key: testKey, From: "a"}, netip.AddrPort{}, Dead("x", 1), "invalid destination"},
		{"bad key length", Forger{Key: make([]byte, 20), From: "a"}, to, Left("x", 1), "16, 24 or 32 bytes"},
		{"alive without address", Forger{Key: testKey, From: "a"}, to, Alive("x", 1, netip.AddrPort{}), "without an address"},
		{"no node", Forger{Key: testKey, From: "a"}, to, Left("", 1), "without a node name"},
		{"unknown kind", Forger{Key: testKey, From: "a"}, to, Message{Kind: "resurrect", Node: "x"}, `unknown message kind "resurrect"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Send(tc.to, tc.msg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Send = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
