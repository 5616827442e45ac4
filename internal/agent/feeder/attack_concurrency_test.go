package feeder

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
)

// lateWrites models the apiserver behind a client-side timeout: a write
// the client gave up on (its context ended) may still reach the server,
// later than writes the client sent after it. The report's apply is
// conditional on the resourceVersion read just before it
// (APIReports.WriteFencing): the late write is applied only if nothing
// was written since.
type lateWrites struct {
	*reports
	// stall: a write blocks until its context ends and returns its
	// error, but stays in flight at the server (land applies it).
	stall atomic.Bool
	// gate, when set, holds every write until it is closed (or the
	// write's context ends); entered gets one value per write that
	// reaches it.
	gate    chan struct{}
	entered chan struct{}

	mu       sync.Mutex
	inflight []lateWrite
}

type lateWrite struct {
	rep     v1alpha1.FencingReport
	version int // the report's version when the write began
}

func (l *lateWrites) WriteFencing(ctx context.Context, rep v1alpha1.FencingReport) error {
	if l.entered != nil {
		select {
		case l.entered <- struct{}{}:
		default:
		}
	}
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if l.stall.Load() {
		at := l.reports.at()
		<-ctx.Done()
		l.mu.Lock()
		l.inflight = append(l.inflight, lateWrite{rep, at})
		l.mu.Unlock()
		return ctx.Err()
	}
	return l.reports.WriteFencing(ctx, rep)
}

// land delivers the writes the client gave up on, now; the server
// applies those whose version still holds, and returns how many.
func (l *lateWrites) land() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, w := range l.inflight {
		if l.reports.applyAt(w.rep, w.version) {
			n++
		}
	}
	l.inflight = nil
	return n
}

// armedWithLeaseSanction brings a (of a, b, c) to: armed, its peers'
// answers from t0 = 1h, its report written and announced. It returns
// the late-writes stub now wired as a's Reports.
func armedLab(t *testing.T) (*clock, *fencing.Document, map[string]*agent, *lateWrites) {
	t.Helper()
	clk := &clock{now: time.Hour}
	doc := &fencing.Document{List: fencing.List{Number: 1, Members: []string{"a", "b", "c"}}}
	agents := lab(t, clk, doc, "a", "b", "c")
	a := agents["a"]
	lw := &lateWrites{reports: a.reports}
	a.f.cfg.Reports = lw
	pollAll(t, agents, true)
	a.f.Tick(context.Background())
	if !a.f.Armed() {
		t.Fatal("not armed once a majority answered")
	}
	if r := a.reports.last(); r == nil || r.Armed {
		t.Fatalf("setup: the report before the arm = %+v, want written and disarmed", r)
	}
	return clk, doc, agents, lw
}

// TestAttackLateArmedReportLandsAfterDisarm: a report computed before a
// disarm must never land after it (it failed while the apply carried no
// resourceVersion).
//
// apiTimeout abandons a write client-side; apiMu then orders only the
// client's calls, not the server's applies. The write of "armed" the
// client gave up on is applied after the disarmed report was written,
// read back and the magic close done: the API shows ARMED for a node
// whose watchdog is off. The agent never corrects it (its last written
// report, the disarmed one, is the same as what it would write next).
// The node disarmed because its peers stopped answering, so they testify
// silence; once it also loses the API the controller waits T + 2W and
// taints a node that is alive and unfenced: two writers on one volume.
func TestAttackLateArmedReportLandsAfterDisarm(t *testing.T) {
	clk, doc, agents, lw := armedLab(t)
	a := agents["a"]
	ctx := context.Background()

	// 1h+5s: a poll's write of "armed" times out at the client (4 s),
	// but is in flight at the server.
	clk.add(5 * sec)
	lw.stall.Store(true)
	a.f.pollAPI(ctx)
	lw.stall.Store(false)
	if len(lw.inflight) != 1 || !lw.inflight[0].rep.Armed {
		t.Fatalf("setup: in flight %+v, want the armed report", lw.inflight)
	}
	// 1h+8s: the Lease is seen renewed (rule (a): sanctioned to 1h+21s);
	// the armed report is written again, fine.
	a.leases.mu.Lock()
	a.leases.rt = "r1"
	a.leases.mu.Unlock()
	clk.add(3 * sec)
	a.f.pollAPI(ctx)
	// 1h+17s: the peers' answers (to probes of 1h) are older than T; the
	// Lease still sanctions: Tick disarms, after the disarmed report
	// reads back.
	clk.add(9 * sec)
	a.f.Tick(ctx)
	a.dev.mu.Lock()
	disarmed := a.dev.disarmed
	a.dev.mu.Unlock()
	if !disarmed {
		t.Fatal("setup: Tick did not disarm with the peers gone and the Lease sanctioning")
	}
	if r := a.reports.last(); r == nil || r.Armed {
		t.Fatalf("setup: the report after the disarm = %+v", r)
	}
	// The abandoned write lands now.
	lw.land()
	// The agent polls on; it does not rewrite what it believes written.
	for range 3 {
		clk.add(time.Second)
		a.f.pollAPI(ctx)
	}
	if r := a.reports.last(); r != nil && r.Armed && !a.f.Armed() {
		// Drive the controller: a is cut off from the API now (Dead);
		// b and c have heard nothing from a since 1h.
		obs := &fencing.Observation{LeaseVersion: "l1", BootID: "a-boot", Report: fencing.ReportFromAPI("v9", r)}
		fencer := fencing.NewFencer("a", fencing.FencerOptions{})
		members := []*Feeder{agents["b"].f, agents["c"].f}
		var round string
		for range 120 {
			now := clk.read()
			in := fencing.Input{Now: now, Dead: true, Read: obs}
			if round != "" {
				in.Testimonies = testimonies(members, fencing.Document{List: doc.List, Rounds: []fencing.RoundRequest{{Node: "a", Round: round}}})
			}
			st := fencer.Step(in)
			switch st.Action {
			case fencing.PublishRound:
				fencer.Published(st.Round)
				round = st.Round
			case fencing.Taint:
				t.Fatalf("UNSAFE at %s: the API shows armed=%v (a write abandoned at the client's %s timeout, applied after the disarm), the watchdog was magic-closed at 1h17s (disarmed=%v, armed=%v): the controller taints a live, unfenced node",
					now, r.Armed, a.f.apiTimeout(), a.dev.disarmed, a.f.Armed())
			}
			clk.add(sec)
		}
		t.Fatalf("the API shows armed after the magic close (no taint within 120 s)")
	}
}

// TestAttackLateOldListReportLandsAfterFollow: the same for a report of
// the old list after follow (it failed for the same reason).
//
// follow writes a report naming both lists before counting against the
// new one; a write of the old list alone, abandoned at the client just
// before, lands after it. The API then names only list 1 while the agent
// counts (and feeds) on the answers of list 2's majority; the controller
// counts testimony against list 1 only. The agent never rewrites it
// (sameReport against what it believes written).
func TestAttackLateOldListReportLandsAfterFollow(t *testing.T) {
	clk, doc, agents, lw := armedLab(t)
	a := agents["a"]
	ctx := context.Background()
	clk.add(2 * sec)
	lw.stall.Store(true)
	a.f.pollAPI(ctx) // armed, list 1: abandoned at the client
	lw.stall.Store(false)
	if len(lw.inflight) != 1 {
		t.Fatalf("setup: in flight %+v", lw.inflight)
	}
	doc.List = fencing.List{Number: 2, Members: []string{"a", "d", "e"}}
	clk.add(2 * sec)
	a.f.pollAPI(ctx) // follows list 2: [2 1] written, then [2]
	a.f.mu.Lock()
	counts := a.f.san.List().Number
	a.f.mu.Unlock()
	if counts != 2 {
		t.Fatalf("setup: counts against list %d, want 2", counts)
	}
	lw.land()
	for range 3 {
		clk.add(time.Second)
		a.f.pollAPI(ctx)
	}
	r := a.reports.last()
	if r == nil || !slices.ContainsFunc(r.Lists, func(l v1alpha1.MemberList) bool { return l.Number == counts }) {
		var named []int64
		if r != nil {
			for _, l := range r.Lists {
				named = append(named, l.Number)
			}
		}
		t.Fatalf("the API's report names lists %v (armed=%v) while the agent counts against list %d (a write abandoned at the client landed after follow's)",
			named, r != nil && r.Armed, counts)
	}
}

// TestAttackDisarmWaitsForTheWriteInFlight: PASSES (holds). In the
// process, apiMu orders a disarm after a poll whose armed report is being
// written: a tick meanwhile does not disarm, a tick after it does, and the
// disarmed report is what the API shows once the watchdog is
// magic-closed.
func TestAttackDisarmWaitsForTheWriteInFlight(t *testing.T) {
	clk, _, agents, lw := armedLab(t)
	a := agents["a"]
	ctx := context.Background()
	clk.add(5 * sec)
	a.f.pollAPI(ctx) // Lease read at 1h+5s; armed written
	a.leases.mu.Lock()
	a.leases.rt = "r1"
	a.leases.mu.Unlock()
	a.f.mu.Lock()
	a.f.written = nil // so that the next poll writes again
	a.f.mu.Unlock()
	clk.add(12 * sec) // 1h+17s: peers lapsed, Lease sanctions to 1h+21s
	lw.gate = make(chan struct{})
	lw.entered = make(chan struct{}, 1)
	polled := make(chan struct{})
	go func() { defer close(polled); a.f.pollAPI(ctx) }()
	<-lw.entered // the armed report is being written
	ticked := make(chan struct{})
	go func() { defer close(ticked); a.f.Tick(ctx) }()
	time.Sleep(100 * time.Millisecond)
	a.dev.mu.Lock()
	early := a.dev.disarmed
	a.dev.mu.Unlock()
	if early {
		t.Fatal("disarmed while a report computed as armed was still being written")
	}
	close(lw.gate)
	<-polled
	<-ticked
	// The tick that found the poll holding the API left the disarm to the
	// next tick, so as not to stop feeding and probing meanwhile.
	a.f.Tick(ctx)
	a.dev.mu.Lock()
	disarmed := a.dev.disarmed
	a.dev.mu.Unlock()
	if r := a.reports.last(); !disarmed || r == nil || r.Armed {
		t.Fatalf("disarmed %v, report %+v: want the disarmed report last", disarmed, r)
	}
}

// TestAttackRunShutdownWithAWriteInFlight: PASSES (holds). ctx ends while
// the API goroutine writes the armed report: Run waits for it, then Stop
// writes the disarmed report, reads it back and disarms; nothing is
// probed after Run returned, and the last report says disarmed.
func TestAttackRunShutdownWithAWriteInFlight(t *testing.T) {
	_, _, agents, lw := armedLab(t)
	a := agents["a"]
	// Count the probes (an address is resolved for each; the socket
	// itself is shared with the serving goroutine lab started).
	var sent atomic.Int64
	addr := a.f.cfg.Address
	a.f.cfg.Address = func(m string) (net.Addr, bool) { sent.Add(1); return addr(m) }
	a.f.cfg.Poll = 50 * time.Millisecond
	lw.gate = make(chan struct{})
	lw.entered = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.f.Run(ctx) }()
	<-lw.entered // Run's first poll writes "armed"
	time.Sleep(200 * time.Millisecond)
	cancel()
	close(lw.gate) // the stop's own writes go through
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	after := sent.Load()
	if after == 0 {
		t.Fatal("setup: Run sent no probes")
	}
	time.Sleep(300 * time.Millisecond)
	if n := sent.Load(); n != after {
		t.Errorf("%d probes sent after Run returned", n-after)
	}
	a.dev.mu.Lock()
	disarmed, closed := a.dev.disarmed, a.dev.closed
	a.dev.mu.Unlock()
	if r := a.reports.last(); !disarmed || closed || r == nil || r.Armed {
		t.Fatalf("after the stop: disarmed %v closed %v report %+v", disarmed, closed, r)
	}
}

// TestAttackTickWaitsBehindAPollOfAHangingAPI (liveness, not safety: the
// failure would be a reset, never a feed without sanction; it failed
// while Tick waited for apiMu).
//
// The change's claim is that the probes (and so the feeds) never wait
// behind a call to the API. But Tick runs disarm in the loop that feeds
// and probes, and disarm now takes apiMu: while a poll holds it through
// its bounded calls (Lease read, report write, each up to apiTimeout),
// the loop is stuck, then spends the disarm's own apiTimeout. With the
// API hanging that is ~3 x 4 s = 12 s > W with no keepalive and no probe:
// a node whose peers come back meanwhile is still reset.
func TestAttackTickWaitsBehindAPollOfAHangingAPI(t *testing.T) {
	clk, _, agents, _ := armedLab(t)
	a := agents["a"]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk.add(5 * sec)
	a.f.pollAPI(ctx) // Lease r0 read at 1h+5s
	a.leases.mu.Lock()
	a.leases.rt = "r1"
	a.leases.mu.Unlock()
	clk.add(12 * sec)
	a.f.pollAPI(ctx) // r1 at 1h+17s: sanctioned to 1h+21s; peers lapsed
	a.leases.hang.Store(true)
	a.reports.hang.Store(true)
	a.f.mu.Lock()
	a.f.written = nil // the poll has a report to write
	a.f.mu.Unlock()
	polled := make(chan struct{})
	go func() { defer close(polled); a.f.pollAPI(ctx) }()
	time.Sleep(50 * time.Millisecond) // the poll holds apiMu
	start := time.Now()
	ticked := make(chan struct{})
	go func() { defer close(ticked); a.f.Tick(ctx) }()
	bound := a.f.apiTimeout() + time.Second // the disarm's own calls, and one feed period
	select {
	case <-ticked:
	case <-time.After(bound):
		t.Errorf("Tick (the loop that feeds the watchdog and sends the probes) still blocked after %s behind a poll's apiMu, W = %s",
			time.Since(start).Round(100*time.Millisecond), fencing.DefaultWatchdogTimeout)
		select {
		case <-ticked:
			t.Logf("Tick returned after %s", time.Since(start).Round(100*time.Millisecond))
		case <-time.After(20 * time.Second):
		}
	}
	cancel()
	<-polled
	<-ticked
}

// stampedLeases records the boot clock at each read's actual call.
type stampedLeases struct {
	*leases
	clk   *clock
	mu    sync.Mutex
	calls []time.Duration
}

func (s *stampedLeases) ReadLease(ctx context.Context) (fencing.Renewal, error) {
	s.mu.Lock()
	s.calls = append(s.calls, s.clk.read())
	s.mu.Unlock()
	return s.leases.ReadLease(ctx)
}

// TestAttackLeaseSendTimeAfterTheWaitForAPIMu: PASSES (holds). A poll
// that waits on apiMu (a disarm holding it) stamps its Lease read after
// the wait; a stamp taken before the read is only ever earlier than the
// send, which shortens the sanction: rule (a) never counts from later
// than the read it relies on was sent.
func TestAttackLeaseSendTimeAfterTheWaitForAPIMu(t *testing.T) {
	clk, _, agents, _ := armedLab(t)
	a := agents["a"]
	ctx := context.Background()
	sl := &stampedLeases{leases: a.leases, clk: clk}
	a.f.cfg.Leases = sl
	a.f.apiMu.Lock() // as a disarm in progress
	polled := make(chan struct{})
	go func() { defer close(polled); a.f.pollAPI(ctx) }()
	time.Sleep(50 * time.Millisecond)
	clk.add(10 * sec)
	a.f.apiMu.Unlock()
	<-polled
	a.leases.mu.Lock()
	a.leases.rt = "r1"
	a.leases.mu.Unlock()
	clk.add(2 * sec)
	a.f.pollAPI(ctx)
	a.f.mu.Lock()
	until := a.f.san.Until()
	a.f.mu.Unlock()
	sl.mu.Lock()
	first := sl.calls[0]
	sl.mu.Unlock()
	if until > first+fencing.DefaultSanctionWindow {
		t.Fatalf("sanctioned until %s, past the first read's call (%s) + T", until, first)
	}
	if until != first+fencing.DefaultSanctionWindow {
		t.Logf("sanctioned until %s (first read called at %s): conservative", until, first)
	}
}
