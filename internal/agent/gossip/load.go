package gossip

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"rebound/pkg/liveness"
)

// LoadResult is what MeasureLoad measured of one cluster of members.
type LoadResult struct {
	Members int
	// Window is how long the steady state was measured.
	Window time.Duration
	// Converged is how long the members took from their start until each
	// had every other alive and had written its watches.
	Converged time.Duration
	// Per agent, the mean over the members, in the steady state: bytes
	// per second sent and received, as packets (probes and gossip, UDP)
	// and as streams (push/pull anti-entropy, TCP).
	SentPerSecond, ReceivedPerSecond   float64
	PacketsPerSecond, StreamsPerSecond float64
	// MaxPerSecond is the busiest member's, sent and received.
	MaxPerSecond float64
	// Departures counts the members declared dead or left, as each member
	// heard it, in the window: with nobody killed yet, any is a false
	// suspicion memberlist did not take back in time, and the window was
	// not the steady state (members starved of CPU, too many for the
	// machine).
	Departures uint64
	// Victim is the member killed (shut down without leaving), Watchers
	// its watchers. Detection is the time from the kill until a quorum of
	// them had written it Dead, DetectionAll until all had; Writes counts
	// every member's writes in that time.
	Victim                  string
	Watchers                []string
	Detection, DetectionAll time.Duration
	Writes                  int
}

func (r LoadResult) String() string {
	return fmt.Sprintf("%d members: %.0f B/s sent + %.0f B/s received per agent (packets %.0f B/s, streams %.0f B/s; busiest %.0f B/s) over %s; "+
		"%d false departures; one killed member written Dead by a quorum of its %d watchers after %s, by all after %s, %d writes in all; converged in %s",
		r.Members, r.SentPerSecond, r.ReceivedPerSecond, r.PacketsPerSecond, r.StreamsPerSecond, r.MaxPerSecond, r.Window, r.Departures,
		len(r.Watchers), r.Detection.Round(time.Millisecond), r.DetectionAll.Round(time.Millisecond), r.Writes, r.Converged.Round(time.Millisecond))
}

// LoadHosts are MeasureLoad's host stand-ins: Live answers every dial, as
// a live kernel does; Silent drops every SYN, as a dead host does.
type LoadHosts struct {
	Live, Silent netip.AddrPort
}

// LoadHostAddrs are the loopback addresses MeasureLoad's callers put
// their stand-ins on: clear of the members' (loadAddr) and of the
// 127.0.0.x the package's tests use.
var LoadHostAddrs = [2]netip.Addr{netip.AddrFrom4([4]byte{127, 0, 1, 1}), netip.AddrFrom4([4]byte{127, 0, 1, 2})}

// loadAddr is member i's loopback address, 127.0.2.1 on: clear of the
// 127.0.0.x the package's tests use.
func loadAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte(2 + i/250), byte(1 + i%250)})
}

// MeasureLoad runs n members with the agent's settings in this process,
// each on its own loopback address (127.0.2.1 on, any free port), with a
// fresh key, and measures: how long they take to converge; the gossip
// bytes per agent per second over d of steady state; and, after one
// member is killed (shut down without leaving, as by SIGKILL), how long
// until a quorum of its watchers, and all of them, have written it Dead,
// and how many writes that took. Each member starts a push/pull every
// minute, and every n/32 minutes past 32 members (antiEntropyInterval): a
// d shorter than that samples it, a few times longer measures it. It
// sends nothing beyond 127.0.0.0/8.
//
// Every member shares this process's CPU and heap: past about 200
// members on two cores the members starve each other, suspect each other
// falsely (LoadResult.Departures), and what is measured is the machine,
// not the gossip. For its run it raises the garbage collector's target
// (debug.SetGCPercent 400): with the default, collecting the one heap of
// hundreds of members starves their probes, which no member on its own
// node would suffer, and fewer collections change no byte on the wire.
//
// hosts are the two kernels every member's address book points at; the
// caller runs them (the lab's internal/lab/hoststandin), so that this
// package, which the agent links, holds no stand-in of its own.
func MeasureLoad(ctx context.Context, n int, d time.Duration, hosts LoadHosts) (LoadResult, error) {
	if n < 3 || n > 250*250 {
		return LoadResult{}, fmt.Errorf("MeasureLoad: %d members: want 3 to %d", n, 250*250)
	}
	if !hosts.Live.IsValid() || !hosts.Silent.IsValid() {
		return LoadResult{}, fmt.Errorf("MeasureLoad: hosts %+v: want a live and a silent host stand-in", hosts)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return LoadResult{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The API's addresses: each member's, and a host for every node that
	// accepts (a live kernel) until the victim's is made silent.
	book := NewStaticBook()
	liveHost, deadHost := hosts.Live, hosts.Silent
	names := make([]string, n)
	members := make([]*Member, n)
	writers := make([]*recordingWriter, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	start := time.Now()
	for i := range n {
		names[i] = fmt.Sprintf("load-%03d", i)
		writers[i] = &recordingWriter{}
		m, err := New(Config{
			NodeName: names[i], BindAddr: loadAddr(i), Key: key, Join: []string{"127.0.0.1"},
			ReportInterval: time.Hour, RetryInterval: 200 * time.Millisecond, MaxRetryInterval: 2 * time.Second,
			Writer: writers[i], Logger: discard, Book: book, anyPort: true,
		})
		if err != nil {
			for _, m := range members[:i] {
				m.kill()
			}
			return LoadResult{}, err
		}
		members[i] = m
		book.SetMember(names[i], m.Addr())
		book.SetHost(names[i], liveHost)
	}
	seed := func(i int) string {
		return net.JoinHostPort(members[i].cfg.BindAddr.String(), strconv.Itoa(members[i].Port()))
	}
	for i, m := range members {
		m.cfg.Join = nil
		for _, s := range []int{0, 1, 2} {
			if s != i {
				m.cfg.Join = append(m.cfg.Join, seed(s))
			}
		}
	}
	for _, m := range members {
		wg.Go(func() { _ = m.Run(ctx) })
		// A DaemonSet's agents do not all start in the same millisecond.
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return LoadResult{}, err
		}
	}

	k := liveness.DefaultWatchers
	res := LoadResult{Members: n, Window: d}
	// Converged: every member has seen every other alive (a member
	// suspected for a moment by some, as happens when 300 of them share
	// two cores, is still converged) and has written its watches.
	converged := func() bool {
		for i, m := range members {
			m.mu.Lock()
			seen := len(m.t.members)
			m.mu.Unlock()
			if seen != n-1 {
				return false
			}
			last, ok := writers[i].last()
			if !ok || len(last.Watches) != min(k, n-1) {
				return false
			}
		}
		return true
	}
	if err := pollUntil(ctx, time.Minute+time.Duration(n)*200*time.Millisecond, converged); err != nil {
		lo, hi, written := n, 0, 0
		for i, m := range members {
			m.mu.Lock()
			c := len(m.t.members) + 1
			m.mu.Unlock()
			lo, hi = min(lo, c), max(hi, c)
			if last, ok := writers[i].last(); ok && len(last.Watches) == min(k, n-1) {
				written++
			}
		}
		return res, fmt.Errorf("MeasureLoad: %d members did not converge: %w (each has seen %d to %d members alive; %d have written their %d watches)", n, err, lo, hi, written, min(k, n-1))
	}
	res.Converged = time.Since(start)
	// Let the join's broadcasts finish their retransmissions: each member
	// relays each member's alive message RetransmitMult x log10(n) times,
	// a few dozen per packet, so at 300 members that takes some 10 s.
	// Settled is when two seconds carry at most 10% more than the two
	// before.
	total := func() (t uint64) {
		for _, m := range members {
			t += m.Traffic().Total()
		}
		return t
	}
	prev, prevRate := total(), uint64(0)
	for i := range 30 {
		if err := sleepCtx(ctx, 2*time.Second); err != nil {
			return res, err
		}
		cur := total()
		rate := cur - prev
		prev = cur
		if i > 0 && rate <= prevRate*11/10 {
			break
		}
		prevRate = rate
	}

	before := make([]TrafficStats, n)
	leavesBefore := uint64(0)
	for i, m := range members {
		before[i] = m.Traffic()
		leavesBefore += m.leaves()
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return res, err
	}
	window := time.Since(t0).Seconds()
	for i, m := range members {
		res.Departures += m.leaves()
		a := m.Traffic()
		sent := float64(a.PacketBytesSent+a.StreamBytesSent-before[i].PacketBytesSent-before[i].StreamBytesSent) / window
		recv := float64(a.PacketBytesReceived+a.StreamBytesReceived-before[i].PacketBytesReceived-before[i].StreamBytesReceived) / window
		res.SentPerSecond += sent / float64(n)
		res.ReceivedPerSecond += recv / float64(n)
		res.PacketsPerSecond += float64(a.PacketBytesSent+a.PacketBytesReceived-before[i].PacketBytesSent-before[i].PacketBytesReceived) / window / float64(n)
		res.StreamsPerSecond += float64(a.StreamBytesSent+a.StreamBytesReceived-before[i].StreamBytesSent-before[i].StreamBytesReceived) / window / float64(n)
		res.MaxPerSecond = max(res.MaxPerSecond, sent+recv)
	}
	res.Departures -= leavesBefore

	victim := n / 2
	res.Victim = names[victim]
	res.Watchers = liveness.Watchers(names[victim], names, k)
	writesBefore := 0
	for _, w := range writers {
		writesBefore += w.count()
	}
	killed := time.Now()
	members[victim].kill()
	// Its host goes with it, silent as a dead machine.
	book.SetHost(names[victim], deadHost)
	dead := func() (quorum, all bool) {
		c := 0
		for _, w := range res.Watchers {
			i := slices.Index(names, w)
			if last, ok := writers[i].last(); ok {
				if watch, ok := last.Of(names[victim]); ok && watch.State == liveness.GossipDead {
					c++
				}
			}
		}
		return c >= liveness.Quorum(len(res.Watchers)), c == len(res.Watchers)
	}
	if err := pollUntil(ctx, time.Minute, func() bool {
		q, all := dead()
		if q && res.Detection == 0 {
			res.Detection = time.Since(killed)
		}
		return all
	}); err != nil {
		return res, fmt.Errorf("MeasureLoad: the watchers %v of the killed %s did not all write it Dead: %w", res.Watchers, res.Victim, err)
	}
	res.DetectionAll = time.Since(killed)
	for _, w := range writers {
		res.Writes += w.count()
	}
	res.Writes -= writesBefore
	return res, nil
}

// recordingWriter keeps every write, in memory.
type recordingWriter struct {
	mu     sync.Mutex
	writes []liveness.GossipReport
	fail   error
}

func (w *recordingWriter) WriteGossip(_ context.Context, g liveness.GossipReport) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return w.fail
	}
	g.Watches = slices.Clone(g.Watches)
	w.writes = append(w.writes, g)
	return nil
}

func (w *recordingWriter) last() (liveness.GossipReport, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.writes) == 0 {
		return liveness.GossipReport{}, false
	}
	return w.writes[len(w.writes)-1], true
}

func (w *recordingWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

func (w *recordingWriter) since(i int) []liveness.GossipReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes[min(i, len(w.writes)):])
}

var errTimeout = errors.New("timed out")

// pollUntil calls cond every 20 ms until it holds, ctx ends or the
// timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if cond() {
				return nil
			}
			return fmt.Errorf("%w after %s", errTimeout, timeout)
		case <-tick.C:
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
