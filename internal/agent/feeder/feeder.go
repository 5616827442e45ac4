// Package feeder runs the agent's side of watchdog self-fencing: it keeps
// the fencing rule (pkg/fencing.Sanction) fed with the evidence it counts,
// quorum reads of the node's Lease and answers to its own probes, and
// feeds the node's watchdog only while the rule allows. It answers the
// other agents' probes, recording whom it heard, and testifies in the
// controller's fencing rounds. The rule is pkg/fencing's; this package
// only gathers, times and acts.
package feeder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/internal/agent/watchdog"
	"rebound/pkg/fencing"
)

// LeaseReader reads the node's Lease by quorum (a GET with no
// resourceVersion, never from a cache).
type LeaseReader interface {
	ReadLease(ctx context.Context) (fencing.Renewal, error)
}

// Reports writes the agent's fencing report and reads it back by quorum.
type Reports interface {
	WriteFencing(ctx context.Context, r v1alpha1.FencingReport) error
	ReadFencing(ctx context.Context) (*v1alpha1.FencingReport, error)
}

// Config wires a Feeder.
type Config struct {
	Node   string
	Timing fencing.Timing
	// Poll is how often the Lease is read and the members probed.
	Poll time.Duration
	// Open opens (and so starts) the watchdog with timeout W.
	Open func(timeout time.Duration) (watchdog.Device, error)
	// BootClock reads the machine's boot clock (CLOCK_BOOTTIME).
	BootClock func() time.Duration
	BootID    string
	Leases    LeaseReader
	Reports   Reports
	// Document returns the latest fencing document the controller
	// published, false while none valid was read.
	Document func() (fencing.Document, bool)
	// Conn is the UDP socket the probes go out of and come in to.
	Conn net.PacketConn
	// Address resolves a member's probe address.
	Address func(node string) (net.Addr, bool)
	// Keys returns the agents' shared keys; the first signs.
	Keys func() [][]byte
	// StatePath is the file on the host that keeps the member list.
	StatePath string
	Logger    *slog.Logger
}

// Feeder is one agent's fencing loop.
type Feeder struct {
	cfg     Config
	started time.Duration

	// apiMu orders the writes of the report: a report computed before a
	// disarm is never written after the disarmed one.
	apiMu sync.Mutex

	mu  sync.Mutex
	san *fencing.Sanction
	// announced: a report showing this process's boot, timing and list
	// has been written and read back; the watchdog arms only then.
	announced bool
	lists     []fencing.List // what the next report names
	device    watchdog.Device
	reason    string
	heard     map[string]time.Duration
	pending   map[[nonceLen]byte]pendingProbe
	written   *v1alpha1.FencingReport
	lastFeed  time.Duration
}

type pendingProbe struct {
	member string
	sentAt time.Duration
}

// New returns a Feeder with the member list kept on the host, if any.
func New(cfg Config) (*Feeder, error) {
	if err := cfg.Timing.Validate(fencing.DefaultKubeletRenewInterval, cfg.Poll); err != nil {
		return nil, err
	}
	f := &Feeder{cfg: cfg, started: cfg.BootClock(), heard: map[string]time.Duration{}, pending: map[[nonceLen]byte]pendingProbe{}}
	list, err := loadList(cfg.StatePath)
	if err != nil {
		return nil, err
	}
	f.san = fencing.NewSanction(cfg.Node, cfg.Timing, list)
	if list.Number > 0 {
		f.lists = []fencing.List{list}
	}
	f.reason = "not sanctioned yet since the agent started"
	return f, nil
}

// Run feeds until ctx ends, then stops gracefully (Stop).
//
// The probes go out on their own ticker, never behind a call to the API:
// an apiserver that is down, or slow to refuse, must not delay the
// evidence that holds while it is (rule (b)), or an outage of the control
// plane would starve every node's watchdog at once. The API's part of a
// poll (the Lease, the document, the report) runs beside it, each call
// bounded.
func (f *Feeder) Run(ctx context.Context) error {
	go f.serve(ctx)
	feed := time.NewTicker(f.cfg.Timing.Watchdog / 10)
	defer feed.Stop()
	probe := time.NewTicker(f.cfg.Poll)
	defer probe.Stop()
	apiDone := make(chan struct{})
	go func() {
		defer close(apiDone)
		poll := time.NewTicker(f.cfg.Poll)
		defer poll.Stop()
		for {
			f.pollAPI(ctx)
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
			}
		}
	}()
	f.probe()
	for {
		select {
		case <-ctx.Done():
			<-apiDone
			stop, cancel := context.WithTimeout(context.Background(), f.cfg.Timing.Watchdog/2)
			defer cancel()
			return f.Stop(stop)
		case <-feed.C:
			f.Tick(ctx)
		case <-probe.C:
			f.probe()
		}
	}
}

// Tick applies the rule to the watchdog: arm, feed, or disarm.
func (f *Feeder) Tick(ctx context.Context) {
	f.mu.Lock()
	now := f.cfg.BootClock()
	switch {
	case f.device == nil && f.announced && f.san.MayArm(now):
		d, err := f.cfg.Open(f.cfg.Timing.Watchdog)
		if err != nil {
			f.reason = err.Error()
			break
		}
		if d.Timeout() != f.cfg.Timing.Watchdog {
			f.reason = fmt.Sprintf("the watchdog's timeout is %s, not %s", d.Timeout(), f.cfg.Timing.Watchdog)
			_ = d.Disarm()
			break
		}
		f.device, f.reason, f.lastFeed = d, "", now
		f.cfg.Logger.Info("watchdog armed", "timeout", d.Timeout(), "sanctionedUntil", f.san.Until()-now)
	case f.device != nil && f.san.MayFeed(now):
		if err := f.device.Keepalive(); err != nil {
			f.cfg.Logger.Error("feed the watchdog", "err", err)
		} else {
			f.lastFeed = now
		}
	}
	disarm := f.device != nil && !f.san.PeersHold(now) && f.san.Sanctioned(now)
	f.mu.Unlock()
	if disarm && f.apiMu.TryLock() {
		// The peers no longer hold: disarm while the API can see it, so
		// that a probe path blocked everywhere never turns an API outage
		// into a reset of every node. Not behind a poll that holds the
		// API (this loop feeds and probes): the next tick tries again.
		err := f.disarmLocked(ctx, "a majority of the members no longer answers")
		f.apiMu.Unlock()
		if err != nil {
			f.cfg.Logger.Error("disarm", "err", err)
		}
	}
}

// Stop is the graceful stop: disarm if the rule allows (sanctioned, and a
// report saying disarmed written and read back). Otherwise the device is
// closed without the magic close and the watchdog resets the node, as
// any other stop of an armed agent does.
func (f *Feeder) Stop(ctx context.Context) error {
	err := f.disarm(ctx, "the agent stopped")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.device != nil {
		f.cfg.Logger.Error("stopping without disarming: the watchdog will reset the node", "err", err)
		cerr := f.device.Close()
		f.device = nil
		return errors.Join(err, cerr)
	}
	return nil
}

func (f *Feeder) disarm(ctx context.Context, why string) error {
	f.apiMu.Lock()
	defer f.apiMu.Unlock()
	return f.disarmLocked(ctx, why)
}

// disarmLocked is disarm with apiMu held.
func (f *Feeder) disarmLocked(ctx context.Context, why string) error {
	ctx, cancel := context.WithTimeout(ctx, f.apiTimeout())
	defer cancel()
	f.mu.Lock()
	if f.device == nil {
		f.mu.Unlock()
		return nil
	}
	if !f.san.Sanctioned(f.cfg.BootClock()) {
		f.mu.Unlock()
		return errors.New("not sanctioned: the controller may be fencing this node")
	}
	r := f.reportLocked(false, why)
	f.mu.Unlock()
	if err := f.cfg.Reports.WriteFencing(ctx, r); err != nil {
		return fmt.Errorf("write the disarmed report: %w", err)
	}
	back, err := f.cfg.Reports.ReadFencing(ctx)
	if err != nil {
		return fmt.Errorf("read the disarmed report back: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.device == nil {
		return nil
	}
	if !f.san.MayDisarm(f.cfg.BootClock(), back != nil && !back.Armed && back.BootID == f.cfg.BootID) {
		return errors.New("the disarmed report did not read back, or the sanction ended meanwhile")
	}
	err = f.device.Disarm()
	f.device, f.reason, f.written = nil, why, &r
	f.cfg.Logger.Info("watchdog disarmed", "why", why)
	return err
}

// poll is one round of both parts, in turn: the API's (pollAPI), then
// the probes, to the list it may just have followed. Run runs the two
// apart.
func (f *Feeder) poll(ctx context.Context) {
	f.pollAPI(ctx)
	f.probe()
}

// apiTimeout bounds each of a poll's calls to the API, so that a poll
// ends, and the next starts, even while the apiserver does not answer.
func (f *Feeder) apiTimeout() time.Duration { return max(f.cfg.Poll, f.cfg.Timing.Sanction/4) }

// pollAPI reads the Lease, follows the published list, and writes the
// report and testimonies.
func (f *Feeder) pollAPI(ctx context.Context) {
	f.apiMu.Lock()
	defer f.apiMu.Unlock()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, f.apiTimeout()) }
	sent := f.cfg.BootClock()
	cctx, cancel := call()
	r, err := f.cfg.Leases.ReadLease(cctx)
	cancel()
	if err == nil {
		f.mu.Lock()
		f.san.LeaseRead(sent, r)
		f.mu.Unlock()
	}
	doc, ok := f.cfg.Document()
	if ok {
		cctx, cancel := call()
		f.follow(cctx, doc)
		cancel()
	}
	f.mu.Lock()
	rep := f.reportLocked(f.device != nil, f.reason)
	if ok {
		rep.Testimonies = f.testimoniesLocked(doc)
	}
	same := f.written != nil && sameReport(*f.written, rep)
	f.mu.Unlock()
	if !same {
		cctx, cancel := call()
		err := f.cfg.Reports.WriteFencing(cctx, rep)
		cancel()
		if err != nil {
			f.cfg.Logger.Error("write the fencing report", "err", err)
			return
		}
		f.mu.Lock()
		f.written = &rep
		f.mu.Unlock()
	}
	f.mu.Lock()
	announced := f.announced
	f.mu.Unlock()
	if !announced {
		cctx, cancel := call()
		f.announce(cctx)
		cancel()
	}
}

// announce reads the report back after a write, and lets the watchdog arm
// only once the API shows this process's boot, W, T and member list: the
// controller waits out the T a report states, so an agent must never feed
// under a timing or a list its report does not show (a restarted agent
// with new flags, cut off from the API, behind the old process's report).
func (f *Feeder) announce(ctx context.Context) {
	back, err := f.cfg.Reports.ReadFencing(ctx)
	if err != nil || back == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.san.List()
	f.announced = back.BootID == f.cfg.BootID &&
		time.Duration(back.WatchdogSeconds)*time.Second == f.cfg.Timing.Watchdog &&
		time.Duration(back.SanctionSeconds)*time.Second == f.cfg.Timing.Sanction &&
		(cur.Number == 0 || slices.ContainsFunc(back.Lists, func(l v1alpha1.MemberList) bool { return l.Number == cur.Number }))
}

// follow switches to a newer published list: first a report naming both
// is written, then the list is kept on the host, then counted against.
func (f *Feeder) follow(ctx context.Context, doc fencing.Document) {
	f.mu.Lock()
	cur := f.san.List()
	if doc.List.Number <= cur.Number || !slices.Contains(doc.List.Members, f.cfg.Node) {
		f.mu.Unlock()
		return
	}
	f.lists = []fencing.List{doc.List}
	if cur.Number > 0 {
		f.lists = append(f.lists, cur)
	}
	r := f.reportLocked(f.device != nil, f.reason)
	f.mu.Unlock()
	if err := f.cfg.Reports.WriteFencing(ctx, r); err != nil {
		f.cfg.Logger.Error("write the report naming the new member list", "list", doc.List.Number, "err", err)
		return
	}
	if err := saveList(f.cfg.StatePath, doc.List); err != nil {
		f.cfg.Logger.Error("keep the member list on the host", "err", err)
		return
	}
	f.mu.Lock()
	f.san.SwitchList(doc.List)
	f.lists = []fencing.List{doc.List}
	f.written = &r
	f.mu.Unlock()
}

func (f *Feeder) reportLocked(armed bool, reason string) v1alpha1.FencingReport {
	r := v1alpha1.FencingReport{
		ObservedAt:      metav1.NewTime(time.Now().Truncate(time.Second)),
		Armed:           armed,
		WatchdogSeconds: int32(f.cfg.Timing.Watchdog / time.Second),
		SanctionSeconds: int32(f.cfg.Timing.Sanction / time.Second),
		BootID:          f.cfg.BootID,
	}
	if !armed {
		r.Reason = reason
	}
	for _, l := range f.lists {
		r.Lists = append(r.Lists, v1alpha1.MemberList{Number: l.Number, Members: slices.Clone(l.Members)})
	}
	return r
}

// testimoniesLocked answers every open round about another node: how long
// this process has heard nothing from it, capped at its uptime.
func (f *Feeder) testimoniesLocked(doc fencing.Document) []v1alpha1.FencingTestimony {
	now := f.cfg.BootClock()
	var out []v1alpha1.FencingTestimony
	for _, r := range doc.Rounds {
		if r.Node == f.cfg.Node {
			continue
		}
		silent := now - f.started
		if at, ok := f.heard[r.Node]; ok {
			silent = min(silent, now-at)
		}
		out = append(out, v1alpha1.FencingTestimony{Node: r.Node, Round: r.Round, SilentForMilliseconds: silent.Milliseconds()})
	}
	return out
}

// sameReport compares what matters of two reports: everything but the
// time it was written, and testimonies' silence only to the second.
func sameReport(a, b v1alpha1.FencingReport) bool {
	a.ObservedAt, b.ObservedAt = metav1.Time{}, metav1.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// probe sends a request to every member of the list.
func (f *Feeder) probe() {
	f.mu.Lock()
	members := f.san.List().Members
	keys := f.cfg.Keys()
	now := f.cfg.BootClock()
	// Answers to probes older than T can no longer extend the sanction.
	for n, p := range f.pending {
		if now-p.sentAt > f.cfg.Timing.Sanction {
			delete(f.pending, n)
		}
	}
	type out struct {
		addr net.Addr
		b    []byte
	}
	var outs []out
	for _, m := range members {
		if m == f.cfg.Node || len(keys) == 0 {
			continue
		}
		addr, ok := f.cfg.Address(m)
		if !ok {
			continue
		}
		nonce := newNonce()
		b, err := Probe{From: f.cfg.Node, To: m, Nonce: nonce}.Encode(keys[0])
		if err != nil {
			continue
		}
		f.pending[nonce] = pendingProbe{member: m, sentAt: now}
		outs = append(outs, out{addr, b})
	}
	f.mu.Unlock()
	for _, o := range outs {
		_, _ = f.cfg.Conn.WriteTo(o.b, o.addr)
	}
}

// serve answers the other agents' probes and takes the answers to ours.
func (f *Feeder) serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		_ = f.cfg.Conn.SetReadDeadline(time.Now())
	}()
	buf := make([]byte, MaxProbeLen+1)
	for ctx.Err() == nil {
		n, from, err := f.cfg.Conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if reply := f.Handle(buf[:n]); reply != nil {
			_, _ = f.cfg.Conn.WriteTo(reply, from)
		}
	}
}

// Handle takes one datagram: a request to this node is recorded as heard,
// then answered (the answer is returned); an answer to one of its own
// pending probes counts toward the sanction.
func (f *Feeder) Handle(b []byte) []byte {
	keys := f.cfg.Keys()
	p, err := DecodeProbe(b, keys)
	if err != nil || p.To != f.cfg.Node || p.From == f.cfg.Node {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.BootClock()
	if !p.Answer {
		f.heard[p.From] = now
		reply, err := Probe{Answer: true, From: f.cfg.Node, To: p.From, Nonce: p.Nonce}.Encode(keys[0])
		if err != nil {
			return nil
		}
		return reply
	}
	pp, ok := f.pending[p.Nonce]
	if !ok || pp.member != p.From {
		return nil
	}
	delete(f.pending, p.Nonce)
	f.heard[p.From] = now
	f.san.Answered(p.From, pp.sentAt)
	return nil
}

// Armed reports whether the watchdog is armed.
func (f *Feeder) Armed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.device != nil
}

func loadList(path string) (fencing.List, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fencing.List{}, nil
	}
	if err != nil {
		return fencing.List{}, fmt.Errorf("read the member list kept on the host: %w", err)
	}
	d, err := fencing.ParseDocument(fmt.Appendf(nil, `{"list":%s}`, b))
	if err != nil {
		return fencing.List{}, fmt.Errorf("the member list kept on the host at %s: %w (remove it to start from the published list)", path, err)
	}
	return d.List, nil
}

// saveList writes the list atomically: a temporary file, then a rename.
func saveList(path string, l fencing.List) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fencing-list-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
