package feeder

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rebound/api/v1alpha1"
	"rebound/internal/agent/watchdog"
	"rebound/pkg/fencing"
)

const sec = time.Second

// udp opens a loopback socket closed at the end of the test.
func udp(t *testing.T) net.PacketConn {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newAgent builds a Feeder for node with its list kept on the host (as if
// written by an earlier process), without starting anything.
func newAgent(t *testing.T, node string, tm fencing.Timing, clk *clock, l fencing.List, conn net.PacketConn,
	addrs map[string]net.Addr, dev *device, rep *reports, ls *leases, doc func() (fencing.Document, bool)) *Feeder {
	t.Helper()
	path := filepath.Join(t.TempDir(), "list.json")
	if l.Number > 0 {
		if err := saveList(path, l); err != nil {
			t.Fatal(err)
		}
	}
	if doc == nil {
		doc = func() (fencing.Document, bool) { return fencing.Document{}, false }
	}
	f, err := New(Config{
		Node: node, Timing: tm, Poll: fencing.DefaultPollInterval,
		Open:      func(time.Duration) (watchdog.Device, error) { dev.opened = true; return dev, nil },
		BootClock: clk.read, BootID: node + "-boot", Leases: ls, Reports: rep, Document: doc,
		Conn: conn, Address: func(m string) (net.Addr, bool) { a, ok := addrs[m]; return a, ok },
		Keys: func() [][]byte { return [][]byte{key} }, StatePath: path,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func testimonies(fs []*Feeder, doc fencing.Document) []fencing.Testimony {
	var out []fencing.Testimony
	for _, f := range fs {
		f.mu.Lock()
		for _, tt := range f.testimoniesLocked(doc) {
			out = append(out, fencing.Testimony{Member: f.cfg.Node, Round: tt.Round,
				SilentFor: time.Duration(tt.SilentForMilliseconds) * time.Millisecond, LeaseRenewing: true})
		}
		f.mu.Unlock()
	}
	return out
}

// TestAttackOneMemberForgesTheMajority (a flaw an attack found, now held
// against a member that is not on the path: nonces are random).
//
// Unsafe outcome: node x is tainted while its watchdog is still fed, on the
// honest testimony of a strict majority (b, c, d), because ONE other agent
// (a) kept x sanctioned by answering x's probes in the names of b and c.
// The probes are authenticated only by the agents' shared gossip key, so
// any agent can sign an answer "from" any member; and the nonces are
// nonceOf(seq, sendTime), one counter step per member of the same batch,
// so the probe a receives from x tells it the nonces x sent to b and c.
// x (cut from the API and from b, c, d, but reachable by a) thus holds a
// strict majority {a, "b", "c"} of its list {a,b,c,d,x} and feeds, while
// b, c, d (also a strict majority, and never having heard x) testify to
// silence. The document claims one lying member can never fence a node.
func TestAttackOneMemberForgesTheMajority(t *testing.T) {
	clk := &clock{}
	l := fencing.List{Number: 1, Members: []string{"a", "b", "c", "d", "x"}}
	conns := map[string]net.PacketConn{}
	addrs := map[string]net.Addr{}
	for _, n := range l.Members {
		conns[n] = udp(t)
		addrs[n] = conns[n].LocalAddr()
	}
	// The honest witnesses, up long before the incident; cut off from x.
	var witnesses []*Feeder
	for _, n := range []string{"b", "c", "d"} {
		witnesses = append(witnesses, newAgent(t, n, fencing.DefaultTiming(), clk, l, conns[n], addrs,
			&device{timeout: fencing.DefaultWatchdogTimeout}, &reports{}, &leases{rt: "r0"}, nil))
	}
	clk.add(1000 * sec)
	xdev := &device{timeout: fencing.DefaultWatchdogTimeout}
	x := newAgent(t, "x", fencing.DefaultTiming(), clk, l, conns["x"], addrs, xdev,
		&reports{err: errors.New("cut from the API")}, &leases{err: errors.New("cut from the API")}, nil)

	// The liar: the real agent a's socket and the shared key.
	liar := func() {
		buf := make([]byte, MaxProbeLen+1)
		_ = conns["a"].SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := conns["a"].ReadFrom(buf)
		if err != nil {
			t.Fatalf("a got no probe from x: %v", err)
		}
		p, err := DecodeProbe(buf[:n], [][]byte{key})
		if err != nil || p.From != "x" {
			t.Fatalf("a: %+v %v", p, err)
		}
		seq := binary.BigEndian.Uint64(p.Nonce[:8])
		at := int64(binary.BigEndian.Uint64(p.Nonce[8:]))
		own, _ := Probe{Answer: true, From: "a", To: "x", Nonce: p.Nonce}.Encode(key)
		x.Handle(own)
		// x probes its list in order a, b, c, d: b got seq+1, c seq+2.
		for i, m := range []string{"b", "c"} {
			forged, _ := Probe{Answer: true, From: m, To: "x", Nonce: nonceOf(seq+uint64(i+1), at)}.Encode(key)
			x.Handle(forged)
		}
	}

	// The controller: x's last report (armed, this boot, list 1), and an
	// unchanged Lease since x was cut off at 1000 s.
	obs := &fencing.Observation{LeaseVersion: "l1", BootID: "x-boot", Report: &fencing.Report{Version: "v1", Armed: true,
		Timing: fencing.DefaultTiming(), BootID: "x-boot", Lists: []fencing.List{l}}}
	fencer := fencing.NewFencer("x", fencing.FencerOptions{})
	var round string
	for range 40 {
		x.probe()
		liar()
		x.Tick(context.Background())
		now := clk.read()
		in := fencing.Input{Now: now, Dead: true, Read: obs}
		if round != "" {
			in.Testimonies = testimonies(witnesses, fencing.Document{List: l, Rounds: []fencing.RoundRequest{{Node: "x", Round: round}}})
		}
		st := fencer.Step(in)
		switch st.Action {
		case fencing.PublishRound:
			fencer.Published(st.Round)
			round = st.Round
		case fencing.Taint:
			x.mu.Lock()
			feeding := x.device != nil && x.san.MayFeed(now)
			x.mu.Unlock()
			if feeding {
				t.Fatalf("UNSAFE at %s: the controller taints x (%s) while x's watchdog is armed and x may feed until %s; "+
					"b and c never heard x, a alone answered for them", now, st.Reason, x.san.Until())
			}
			return
		}
		clk.add(2 * sec)
	}
	if !x.Armed() {
		t.Fatal("x never armed: the forgery did not work")
	}
	t.Log("no taint in 80 s")
}

// TestAttackArmsUnderATimingTheAPIDoesNotShow (a flaw an attack found, now
// held: the agent arms only once the API shows its boot, W, T and list).
//
// Unsafe outcome: node x is tainted while x feeds its watchdog. The agent
// arms as soon as it is sanctioned; it never makes sure the report in the
// API states the timing it now runs with. After an agent that died without
// a graceful stop (OOM, SIGKILL, a grace period shorter than W/2) the API
// keeps that process's report: armed, this boot, T = 16 s. If the new
// process runs with a longer --sanction-window (a config rollout; or
// anything above 600 s, which Timing.Validate accepts but the CRD's
// Maximum=600 rejects, so its report can never be written) and its report
// writes fail, it arms and feeds for T_new after the last answers, while
// the controller waits out T_old + 2W and taints.
func TestAttackArmsUnderATimingTheAPIDoesNotShow(t *testing.T) {
	clk := &clock{}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c", "x"}}}
	agents := lab(t, clk, doc, "a", "b", "c")
	clk.add(1000 * sec)
	addrs := map[string]net.Addr{}
	for n, a := range agents {
		addrs[n] = a.conn.LocalAddr()
	}
	conn := udp(t)
	addrs["x"] = conn.LocalAddr()
	// The report the crashed process left: armed with T = 16 s.
	old := &v1alpha1.FencingReport{Armed: true, WatchdogSeconds: 10, SanctionSeconds: 16, BootID: "x-boot",
		Lists: []v1alpha1.MemberList{{Number: 1, Members: doc.List.Members}}}
	rep := &reports{stored: old, err: errors.New("the API is unreachable")}
	xdev := &device{timeout: fencing.DefaultWatchdogTimeout}
	tm := fencing.Timing{Watchdog: 10 * sec, Sanction: 120 * sec}
	x := newAgent(t, "x", tm, clk, doc.List, conn, addrs, xdev, rep, &leases{err: errors.New("unreachable")}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go x.serve(ctx)
	x.poll(ctx) // its report write fails
	deadline := time.Now().Add(5 * time.Second)
	for {
		x.mu.Lock()
		hold := x.san.PeersHold(clk.read())
		x.mu.Unlock()
		if hold {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("peers never held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	x.Tick(ctx)
	if !x.Armed() {
		// Held: x arms only once a report with its own timing reads back.
		return
	}
	// From now x is cut off from everyone. The controller's read is 2 s
	// later, of the report the API holds.
	members := []*Feeder{agents["a"].f, agents["b"].f, agents["c"].f}
	obs := &fencing.Observation{LeaseVersion: "l1", BootID: "x-boot", Report: fencing.ReportFromAPI("v1", rep.last())}
	fencer := fencing.NewFencer("x", fencing.FencerOptions{})
	clk.add(2 * sec)
	var round string
	for range 60 {
		x.Tick(ctx)
		now := clk.read()
		in := fencing.Input{Now: now, Dead: true, Read: obs}
		if round != "" {
			in.Testimonies = testimonies(members, fencing.Document{List: doc.List, Rounds: []fencing.RoundRequest{{Node: "x", Round: round}}})
		}
		st := fencer.Step(in)
		switch st.Action {
		case fencing.PublishRound:
			fencer.Published(st.Round)
			round = st.Round
		case fencing.Taint:
			x.mu.Lock()
			feeding := x.device != nil && x.san.MayFeed(now)
			x.mu.Unlock()
			if feeding {
				t.Fatalf("UNSAFE at %s: tainted (report says T=%s) while x runs T=%s, is armed and may feed until %s",
					now, obs.Report.Timing.Sanction, tm.Sanction, x.san.Until()-tm.Watchdog)
			}
			return
		}
		clk.add(sec)
	}
	t.Log("no taint")
}

// TestAttackReportedSanctionTruncated (a flaw an attack found, now held:
// T must be whole seconds; by itself it only ate into the 3 s margin).
//
// Timing.Validate accepts a --sanction-window that is not whole seconds
// (it checks that only for W), and the report carries
// int32(T / time.Second): an agent running T = 16.9 s reports 16 s, so the
// controller's wait is 0.9 s x 1.01^2 short of what the proof assumes,
// silently spending a third of the margin meant for keepalive writes,
// device rounding and scheduling.
func TestAttackReportedSanctionTruncated(t *testing.T) {
	clk := &clock{now: time.Hour}
	tm := fencing.Timing{Watchdog: 10 * sec, Sanction: 16*sec + 900*time.Millisecond}
	if err := tm.Validate(fencing.DefaultKubeletRenewInterval, fencing.DefaultPollInterval); err != nil {
		// Held: such a window is refused before the agent runs.
		if !strings.Contains(err.Error(), "--sanction-window") {
			t.Fatalf("refused, but not by its flag: %v", err)
		}
		return
	}
	rep := &reports{}
	x := newAgent(t, "x", tm, clk, fencing.List{Number: 1, Members: []string{"a", "b", "x"}}, udp(t), map[string]net.Addr{},
		&device{timeout: 10 * sec}, rep, &leases{rt: "r0"}, nil)
	x.poll(context.Background())
	got := fencing.ReportFromAPI("1", rep.last())
	if got == nil || got.Timing.Sanction < tm.Sanction {
		t.Errorf("the agent runs T=%s and reports T=%v: the controller waits too little", tm.Sanction, got.Timing.Sanction)
	}
}

// TestAttackProbeProtocolHolds: PASSES (holds). Replays, reflections,
// removed keys, answers to someone else's probe and answers naming another
// prober never extend the sanction.
func TestAttackProbeProtocolHolds(t *testing.T) {
	clk := &clock{now: time.Hour}
	l := fencing.List{Number: 1, Members: []string{"a", "b", "c", "x"}}
	bconn, cconn := udp(t), udp(t)
	addrs := map[string]net.Addr{"b": bconn.LocalAddr(), "c": cconn.LocalAddr()}
	oldKey := bytes.Repeat([]byte{3}, 32)
	keys := [][]byte{key}
	x := newAgent(t, "x", fencing.DefaultTiming(), clk, l, udp(t), addrs, &device{timeout: 10 * sec}, &reports{}, &leases{rt: "r0"}, nil)
	x.cfg.Keys = func() [][]byte { return keys }
	x.probe()
	read := func(c net.PacketConn) Probe {
		buf := make([]byte, MaxProbeLen+1)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		p, err := DecodeProbe(buf[:n], keys)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pb, pc := read(bconn), read(cconn)
	enc := func(p Probe, k []byte) []byte { b, _ := p.Encode(k); return b }
	reqToB := enc(pb, key)
	cases := map[string][]byte{
		"holds: x's own request reflected back":             reqToB,
		"holds: b's answer with c's nonce":                  enc(Probe{Answer: true, From: "b", To: "x", Nonce: pc.Nonce}, key),
		"holds: an answer addressed to another prober":      enc(Probe{Answer: true, From: "b", To: "a", Nonce: pb.Nonce}, key),
		"holds: an answer signed with a removed key":        enc(Probe{Answer: true, From: "b", To: "x", Nonce: pb.Nonce}, oldKey),
		"holds: a request turned answer by flipping a byte": func() []byte { b := bytes.Clone(reqToB); b[4] = kindAnswer; return b }(),
		"holds: an answer from the node itself (x to x)":    enc(Probe{Answer: true, From: "x", To: "x", Nonce: pb.Nonce}, key),
	}
	for name, b := range cases {
		x.Handle(b)
		if x.san.Until() != 0 {
			t.Errorf("%s: extended the sanction", name)
		}
	}
	// A genuine answer counts once; its replay changes nothing.
	ans := enc(Probe{Answer: true, From: "b", To: "x", Nonce: pb.Nonce}, key)
	x.Handle(ans)
	clk.add(5 * sec)
	x.Handle(ans)
	x.Handle(enc(Probe{Answer: true, From: "c", To: "x", Nonce: pc.Nonce}, key))
	if u := x.san.Until(); u != time.Hour+fencing.DefaultSanctionWindow {
		t.Errorf("until %s, want the probe's send + T", u-time.Hour)
	}
}

// TestAttackRestartedMemberTestifiesOnlyItsUptime: PASSES (holds). A
// member whose agent restarted after answering x never claims silence
// longer than its new process has been up.
func TestAttackRestartedMemberTestifiesOnlyItsUptime(t *testing.T) {
	clk := &clock{now: time.Hour}
	l := fencing.List{Number: 1, Members: []string{"b", "x"}}
	mk := func() *Feeder {
		return newAgent(t, "b", fencing.DefaultTiming(), clk, l, udp(t), map[string]net.Addr{}, &device{timeout: 10 * sec}, &reports{}, &leases{rt: "r0"}, nil)
	}
	b := mk()
	req, _ := Probe{From: "x", To: "b", Nonce: nonceOf(1, 1)}.Encode(key)
	b.Handle(req)
	clk.add(3 * sec)
	b = mk() // restarted
	clk.add(5 * sec)
	ts := testimonies([]*Feeder{b}, fencing.Document{List: l, Rounds: []fencing.RoundRequest{{Node: "x", Round: "x-1"}}})
	if len(ts) != 1 || ts[0].SilentFor > 5*sec {
		t.Errorf("testimony %+v, want at most the 5 s uptime", ts)
	}
}

// TestAttackStopWithoutSanctionNeverDisarms: PASSES (holds). A stop while
// not sanctioned (the controller may be fencing) closes without the magic
// close, so the watchdog still resets the node; a stop whose disarmed
// report cannot be read back does the same.
func TestAttackStopWithoutSanctionNeverDisarms(t *testing.T) {
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}}}
	agents := lab(t, clk, doc, "a", "b", "c")
	a := agents["a"]
	pollAll(t, agents, true)
	a.f.Tick(context.Background())
	if !a.f.Armed() {
		t.Fatal("not armed")
	}
	// Sanctioned, but the read-back returns an armed report.
	bad := &readsBackArmed{reports: a.reports}
	a.f.cfg.Reports = bad
	if err := a.f.Stop(context.Background()); err == nil || a.dev.disarmed || !a.dev.closed {
		t.Errorf("stop with an armed read-back: err %v disarmed %v closed %v", err, a.dev.disarmed, a.dev.closed)
	}
}

type readsBackArmed struct{ *reports }

func (r *readsBackArmed) ReadFencing(context.Context) (*v1alpha1.FencingReport, error) {
	return &v1alpha1.FencingReport{Armed: true, BootID: "a-boot"}, nil
}
