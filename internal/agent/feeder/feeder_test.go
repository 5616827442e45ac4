package feeder

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rebound/api/v1alpha1"
	"rebound/internal/agent/watchdog"
	"rebound/pkg/fencing"
)

type clock struct {
	mu  sync.Mutex
	now time.Duration
}

func (c *clock) read() time.Duration { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now += d; c.mu.Unlock() }

type device struct {
	mu                       sync.Mutex
	feeds                    int
	disarmed, closed, opened bool
	timeout                  time.Duration
}

func (d *device) Timeout() time.Duration { return d.timeout }
func (d *device) Keepalive() error       { d.mu.Lock(); d.feeds++; d.mu.Unlock(); return nil }
func (d *device) Disarm() error          { d.mu.Lock(); d.disarmed = true; d.mu.Unlock(); return nil }
func (d *device) Close() error           { d.mu.Lock(); d.closed = true; d.mu.Unlock(); return nil }

type leases struct {
	mu   sync.Mutex
	rt   string
	err  error
	hang atomic.Bool // every read blocks until its context ends
}

func (l *leases) ReadLease(ctx context.Context) (fencing.Renewal, error) {
	if l.hang.Load() {
		<-ctx.Done()
		return fencing.Renewal{}, ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return fencing.Renewal{RenewTime: l.rt, Holder: "x"}, l.err
}

// reports stands in for APIReports: like it, a write applies only on the
// report as it was when the write began (its resourceVersion), which
// version counts.
type reports struct {
	mu      sync.Mutex
	stored  *v1alpha1.FencingReport
	version int
	writes  int
	err     error
	hang    atomic.Bool // every call blocks until its context ends
}

// at returns the report's version, as the read before a write sees it.
func (r *reports) at() int { r.mu.Lock(); defer r.mu.Unlock(); return r.version }

func (r *reports) WriteFencing(ctx context.Context, rep v1alpha1.FencingReport) error {
	if r.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.writes++
	r.stored = &rep
	r.version++
	return nil
}

// applyAt applies rep only if the report is still at version: what the
// apiserver does with a write that arrives late.
func (r *reports) applyAt(rep v1alpha1.FencingReport, version int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.version != version {
		return false
	}
	r.stored = &rep
	r.version++
	return true
}

func (r *reports) ReadFencing(ctx context.Context) (*v1alpha1.FencingReport, error) {
	if r.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	return r.stored, nil
}

func (r *reports) last() *v1alpha1.FencingReport { r.mu.Lock(); defer r.mu.Unlock(); return r.stored }

type agent struct {
	f       *Feeder
	dev     *device
	reports *reports
	leases  *leases
	conn    net.PacketConn
}

var key = bytes.Repeat([]byte{7}, 32)

// lab starts one Feeder per name on loopback, sharing clk and the
// published document.
func lab(t *testing.T, clk *clock, doc *fencing.Document, names ...string) map[string]*agent {
	t.Helper()
	agents := map[string]*agent{}
	addrs := map[string]net.Addr{}
	for _, n := range names {
		conn, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		addrs[n] = conn.LocalAddr()
		agents[n] = &agent{dev: &device{timeout: fencing.DefaultWatchdogTimeout}, reports: &reports{}, leases: &leases{rt: "r0"}, conn: conn}
	}
	for _, n := range names {
		a := agents[n]
		f, err := New(Config{
			Node: n, Timing: fencing.DefaultTiming(), Poll: fencing.DefaultPollInterval,
			Open:      func(time.Duration) (watchdog.Device, error) { a.dev.opened = true; return a.dev, nil },
			BootClock: clk.read, BootID: n + "-boot", Leases: a.leases, Reports: a.reports,
			Document: func() (fencing.Document, bool) { return *doc, doc.List.Number > 0 },
			Conn:     a.conn, Address: func(m string) (net.Addr, bool) { ad, ok := addrs[m]; return ad, ok },
			Keys: func() [][]byte { return [][]byte{key} }, StatePath: filepath.Join(t.TempDir(), "list.json"),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		a.f = f
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go f.serve(ctx)
	}
	return agents
}

// pollAll polls every agent and waits until each has the answers of a
// strict majority of its list, or fails.
func pollAll(t *testing.T, agents map[string]*agent, wantHold bool) {
	t.Helper()
	for _, a := range agents {
		a.f.poll(context.Background())
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, a := range agents {
		for {
			a.f.mu.Lock()
			hold := a.f.san.PeersHold(a.f.cfg.BootClock())
			a.f.mu.Unlock()
			if hold == wantHold {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: peers hold = %v, want %v", a.f.cfg.Node, hold, wantHold)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestFeederArmsFeedsAndStopsFeeding(t *testing.T) {
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}}}
	agents := lab(t, clk, doc, "a", "b", "c")
	a := agents["a"]
	a.f.Tick(context.Background())
	if a.f.Armed() {
		t.Fatal("armed before its first sanction")
	}
	pollAll(t, agents, true)
	a.f.Tick(context.Background())
	if !a.f.Armed() || !a.dev.opened {
		t.Fatal("not armed once a majority answered")
	}
	// The report was written after arming and says so.
	a.f.poll(context.Background())
	if r := a.reports.last(); r == nil || !r.Armed || r.WatchdogSeconds != 10 || r.SanctionSeconds != 16 || r.BootID != "a-boot" || len(r.Lists) != 1 {
		t.Fatalf("report = %+v", r)
	}
	feeds := a.dev.feeds
	a.f.Tick(context.Background())
	if a.dev.feeds != feeds+1 {
		t.Fatal("did not feed while sanctioned")
	}
	// Nothing more is seen: once less than W of the sanction remains, no
	// keepalive, and the stop is not a disarm.
	clk.add(fencing.DefaultSanctionWindow - fencing.DefaultWatchdogTimeout + time.Second)
	feeds = a.dev.feeds
	a.f.Tick(context.Background())
	if a.dev.feeds != feeds {
		t.Fatal("fed with less than W of the sanction left")
	}
	clk.add(fencing.DefaultWatchdogTimeout)
	if err := a.f.Stop(context.Background()); err == nil {
		t.Fatal("a stop after the sanction ended reported no error")
	}
	if a.dev.disarmed || !a.dev.closed {
		t.Fatalf("stopped after the sanction ended: disarmed %v closed %v; want closed without the magic close", a.dev.disarmed, a.dev.closed)
	}
}

func TestFeederDisarmsOnlyAfterTheReportReadsBack(t *testing.T) {
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}}}
	agents := lab(t, clk, doc, "a", "b", "c")
	a := agents["a"]
	pollAll(t, agents, true)
	a.f.Tick(context.Background())
	if !a.f.Armed() {
		t.Fatal("not armed")
	}
	a.reports.mu.Lock()
	a.reports.err = errors.New("the API is down")
	a.reports.mu.Unlock()
	if err := a.f.Stop(context.Background()); err == nil || a.dev.disarmed {
		t.Fatalf("disarmed without writing the report (err %v)", err)
	}
	if !a.dev.closed {
		t.Fatal("a stop that cannot disarm must close without the magic close")
	}
}

func TestFeederGracefulStop(t *testing.T) {
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}}}
	agents := lab(t, clk, doc, "a", "b", "c")
	a := agents["a"]
	pollAll(t, agents, true)
	a.f.Tick(context.Background())
	if err := a.f.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !a.dev.disarmed || a.dev.closed {
		t.Fatalf("graceful stop: disarmed %v closed %v", a.dev.disarmed, a.dev.closed)
	}
	if r := a.reports.last(); r == nil || r.Armed || r.Reason == "" {
		t.Fatalf("the report after a graceful stop = %+v, want disarmed with a reason", r)
	}
}

func TestFeederTestifiesCappedAtItsUptime(t *testing.T) {
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}},
		Rounds: []fencing.RoundRequest{{Node: "c", Round: "c-1"}, {Node: "a", Round: "a-1"}}}
	agents := lab(t, clk, doc, "a", "b")
	a := agents["a"]
	clk.add(10 * time.Second)
	pollAll(t, agents, false) // c is not there: no majority of {b, c}
	clk.add(30 * time.Second)
	a.f.poll(context.Background())
	r := a.reports.last()
	if r == nil || len(r.Testimonies) != 1 {
		t.Fatalf("testimonies = %+v, want one, about c (never about itself)", r)
	}
	if got := r.Testimonies[0]; got.Node != "c" || got.Round != "c-1" || got.SilentForMilliseconds != 40000 {
		t.Fatalf("testimony = %+v, want c silent for the agent's 40 s of uptime", got)
	}
	// b was heard 30 s ago (or just now); a round about b says so.
	doc.Rounds = []fencing.RoundRequest{{Node: "b", Round: "b-1"}}
	a.f.poll(context.Background())
	if got := a.reports.last().Testimonies; len(got) != 1 || got[0].SilentForMilliseconds > 30000 {
		t.Fatalf("testimony about b = %+v, want less than the uptime (b answered just now)", got)
	}
}

func TestFeederHandleRefusesForgedAndMisdirectedProbes(t *testing.T) {
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}}}
	a := lab(t, clk, doc, "a")["a"]
	other, _ := Probe{From: "b", To: "c"}.Encode(key)
	forged, _ := Probe{From: "b", To: "a"}.Encode(bytes.Repeat([]byte{9}, 32))
	unasked, _ := Probe{Answer: true, From: "b", To: "a", Nonce: nonceOf(99, 1)}.Encode(key)
	for name, b := range map[string][]byte{"to another node": other, "another key": forged, "an answer never asked": unasked} {
		if reply := a.f.Handle(b); reply != nil {
			t.Errorf("%s: answered", name)
		}
	}
	if len(a.f.heard) != 0 || a.f.san.Until() != 0 {
		t.Fatalf("heard %v, sanctioned until %s: refused probes counted", a.f.heard, a.f.san.Until())
	}
}

func TestFeederKeepsItsListOnTheHost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "list.json")
	if err := saveList(path, fencing.List{Number: 4, Members: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	l, err := loadList(path)
	if err != nil || l.Number != 4 || len(l.Members) != 2 {
		t.Fatalf("loadList = %+v, %v", l, err)
	}
	if l, err := loadList(filepath.Join(t.TempDir(), "none")); err != nil || l.Number != 0 {
		t.Fatalf("no file: %+v, %v; want an empty list", l, err)
	}
}

// TestFeederProbesWhileTheAPIHangs: an apiserver that is down behind a
// path that never answers (or a client that retries) must not hold back
// the probes: with every API call hanging, the members' answers alone
// keep the node sanctioned and its watchdog fed, well past T. A loop that
// probed only after its Lease read returned starved every node's watchdog
// in a control-plane outage.
func TestFeederProbesWhileTheAPIHangs(t *testing.T) {
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}}}
	agents := lab(t, clk, doc, "a", "b", "c")
	a := agents["a"]
	pollAll(t, agents, true)
	a.f.Tick(context.Background())
	if !a.f.Armed() {
		t.Fatal("not armed once a majority answered")
	}
	a.leases.hang.Store(true)
	a.reports.hang.Store(true)
	a.f.cfg.Poll = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for step := range 5 {
		clk.add(4 * time.Second) // 20 s in all, past T (16 s)
		a.dev.mu.Lock()
		feeds := a.dev.feeds
		a.dev.mu.Unlock()
		deadline := time.Now().Add(5 * time.Second)
		for {
			a.dev.mu.Lock()
			fed := a.dev.feeds > feeds
			a.dev.mu.Unlock()
			if fed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %d (%s past the API's hang): the watchdog was not fed while a majority answers", step, time.Duration(step+1)*4*time.Second)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
