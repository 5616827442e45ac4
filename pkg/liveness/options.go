package liveness

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Options tune which reports count. The zero value means the defaults.
type Options struct {
	// ReportMaxAge: reports older than this are stale and ignored; zero
	// means DefaultReportMaxAge.
	ReportMaxAge time.Duration `json:"reportMaxAge,omitempty"`
	// MaxClockSkew: reports (or session times) further in the future than
	// this are ignored; zero means DefaultMaxClockSkew.
	MaxClockSkew time.Duration `json:"maxClockSkew,omitempty"`
	// HoldTime is the BGP hold time of the mesh; zero means
	// DefaultHoldTime. A session Established this long after a NotReady
	// transition proves the peer alive.
	HoldTime time.Duration `json:"holdTime,omitempty"`
	// LeaseMargin is how long past its renew interval a node's Lease may
	// go unrenewed, on rebound's clock, before the Lease plane calls it
	// stale (the controller's --lease-margin); zero means
	// DefaultLeaseMargin. It absorbs the kubelet's jitter and the
	// apiserver's write latency.
	LeaseMargin time.Duration `json:"leaseMargin,omitempty"`
	// Watchers is how many agents watch each member on the gossip ring,
	// and so how many can vote on its death (the controller's
	// --gossip-watchers); zero means DefaultWatchers. The agents'
	// --gossip-watchers must be the same: each writes its own in its
	// gossip read, and WatcherMismatches names those that differ.
	Watchers int `json:"watchers,omitempty"`
	// GossipDistrustWindow is how long a node's gossip plane is not
	// trusted after a quorum of its watchers said Dead while its Lease
	// renewed, and how long a process that starts holds early judgement
	// (it has no such history); the controller's
	// --gossip-distrust-window. Zero means DefaultGossipDistrustWindow.
	GossipDistrustWindow time.Duration `json:"gossipDistrustWindow,omitempty"`
	// GossipDistrustShare is the share of the Ready nodes that may be
	// distrusted at once (at least one node, MaxDistrusted) before early
	// judgement stops cluster-wide; the controller's
	// --gossip-distrust-share. Zero means DefaultGossipDistrustShare.
	GossipDistrustShare float64 `json:"gossipDistrustShare,omitempty"`
}

// Defaults of the two-plane rules.
const (
	// DefaultLeaseMargin: the kubelet renews its Lease every 10 s by
	// default (a quarter of its 40 s duration) with up to a few hundred
	// milliseconds of jitter; 2 s more is ample and keeps detection
	// within about 12 s of death.
	DefaultLeaseMargin = 2 * time.Second
	// DefaultWatchers: three agents watch each member, so a death is
	// written three times whatever the cluster's size, and a quorum of
	// two survives one watcher that died with it or lies.
	DefaultWatchers = 3
	// MinLeaseMargin and MaxLeaseMargin bound a LeaseMargin that is set.
	// The kubelet renews up to 4 % of its interval late (client-go's
	// lease controller jitters every renewal by that much, 400 ms at
	// 10 s), and the write and the watch that brings it add their
	// latency: a smaller margin would find live Leases stale at every
	// renewal. A margin past 30 s would, with the kubelet's default Lease
	// (40 s, renewed every 10 s), outlast the Lease itself, and keep a
	// node that stopped renewing a target (and not stranded) for longer
	// than kube-controller-manager's own node grace.
	MinLeaseMargin = 100 * time.Millisecond
	MaxLeaseMargin = 30 * time.Second
	// DefaultGossipDistrustWindow: a forged membership state outlives
	// its forger by minutes (memberlist keeps a dead member's state for
	// its gossip-to-the-dead time, and a refutation that loses the
	// incarnation race is ignored), and an agent's read counts for the
	// report max age (3 min): a node whose plane lied is held for as
	// long as such a read can still count.
	DefaultGossipDistrustWindow = 3 * time.Minute
	// MinGossipDistrustWindow and MaxGossipDistrustWindow bound a window
	// that is set: under 5 s the hold would end before a stalled Lease
	// is even found stale (a renew interval plus the margin); past an
	// hour a restarted controller would do nothing early for that long.
	MinGossipDistrustWindow = 5 * time.Second
	MaxGossipDistrustWindow = time.Hour
	// DefaultGossipDistrustShare: one Ready node in ten (and at least
	// one) may be distrusted before early judgement stops everywhere.
	// One forged or broken node is an incident about that node; more
	// than a tenth at once is a broken or attacked plane (a rollout on
	// old agents, a firewall on the gossip port, a key split, a forger
	// at work), the moment its remaining Dead votes deserve the least
	// trust. kube-controller-manager draws its own line (55 %
	// unhealthy) for evictions; early judgement is the riskier act.
	DefaultGossipDistrustShare = 0.1
	// MinGossipDistrustShare and MaxGossipDistrustShare bound a share
	// that is set.
	MinGossipDistrustShare = 0.01
	MaxGossipDistrustShare = 0.5
)

// WithDefaults fills zero fields.
func (o Options) WithDefaults() Options {
	if o.ReportMaxAge <= 0 {
		o.ReportMaxAge = DefaultReportMaxAge
	}
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	if o.HoldTime <= 0 {
		o.HoldTime = DefaultHoldTime
	}
	if o.LeaseMargin <= 0 {
		o.LeaseMargin = DefaultLeaseMargin
	}
	if o.Watchers <= 0 {
		o.Watchers = DefaultWatchers
	}
	if o.GossipDistrustWindow <= 0 {
		o.GossipDistrustWindow = DefaultGossipDistrustWindow
	}
	if o.GossipDistrustShare <= 0 {
		o.GossipDistrustShare = DefaultGossipDistrustShare
	}
	return o
}

// Validate names every bad field.
func (o Options) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"evidence.reportMaxAge", o.ReportMaxAge}, {"evidence.maxClockSkew", o.MaxClockSkew}, {"evidence.holdTime", o.HoldTime}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("peering config: %s is %v, must be zero (default) or positive", f.name, f.d))
		}
	}
	// The two settings of the Lease and gossip planes are named by the
	// controller's flags, which alone set them.
	if o.LeaseMargin != 0 {
		errs = append(errs, CheckLeaseMargin("--lease-margin", o.LeaseMargin))
	}
	if o.Watchers != 0 {
		errs = append(errs, CheckWatchers("--gossip-watchers", o.Watchers))
	}
	if o.GossipDistrustWindow != 0 {
		errs = append(errs, CheckGossipDistrustWindow("--gossip-distrust-window", o.GossipDistrustWindow))
	}
	if o.GossipDistrustShare != 0 {
		errs = append(errs, CheckGossipDistrustShare("--gossip-distrust-share", o.GossipDistrustShare))
	}
	return errors.Join(errs...)
}

// CheckWatchers is the one rule for k, how many agents watch each member:
// the controller's --gossip-watchers and every agent's. name is what the
// caller calls the setting, a flag or a field.
func CheckWatchers(name string, k int) error {
	switch {
	case k == 1:
		return fmt.Errorf("%s 1: a lone watcher would decide a death alone; want 2 to %d (default %d)", name, MaxWatchers, DefaultWatchers)
	case k < 2 || k > MaxWatchers:
		return fmt.Errorf("%s %d: want 2 to %d (default %d), the same on the controller and every agent", name, k, MaxWatchers, DefaultWatchers)
	}
	return nil
}

// CheckLeaseMargin is the one rule for the Lease plane's margin
// (--lease-margin); name as for CheckWatchers.
func CheckLeaseMargin(name string, d time.Duration) error {
	switch {
	case d < MinLeaseMargin:
		return fmt.Errorf("%s %v: want %v to %v (default %v); below %v the kubelet's own renewal jitter and the API's latency make live Leases look stale",
			name, d, MinLeaseMargin, MaxLeaseMargin, DefaultLeaseMargin, MinLeaseMargin)
	case d > MaxLeaseMargin:
		return fmt.Errorf("%s %v: want %v to %v (default %v); past %v a node that stopped renewing its Lease would outlast the kubelet's default Lease (40 s) before the Lease plane calls it stale",
			name, d, MinLeaseMargin, MaxLeaseMargin, DefaultLeaseMargin, MaxLeaseMargin)
	}
	return nil
}

// CheckGossipDistrustWindow is the one rule for the distrust window
// (--gossip-distrust-window); name as for CheckWatchers.
func CheckGossipDistrustWindow(name string, d time.Duration) error {
	if d < MinGossipDistrustWindow || d > MaxGossipDistrustWindow {
		return fmt.Errorf("%s %v: want %v to %v (default %v); it must outlast a stalled Lease's detection, and a restarted controller judges nothing early for that long",
			name, d, MinGossipDistrustWindow, MaxGossipDistrustWindow, DefaultGossipDistrustWindow)
	}
	return nil
}

// CheckGossipDistrustShare is the one rule for the cluster-wide stop's
// share (--gossip-distrust-share); name as for CheckWatchers.
func CheckGossipDistrustShare(name string, share float64) error {
	if math.IsNaN(share) || share < MinGossipDistrustShare || share > MaxGossipDistrustShare {
		return fmt.Errorf("%s %v: want %v to %v (default %v), the share of Ready nodes whose gossip plane may be distrusted at once (at least one node) before early judgement stops cluster-wide",
			name, share, MinGossipDistrustShare, MaxGossipDistrustShare, DefaultGossipDistrustShare)
	}
	return nil
}

// WatcherMismatch is an agent whose gossip runs with another number of
// watchers than the controller's: it watches members the controller does
// not hear it for, or the controller waits for votes from watchers that
// do not watch. Either way only votes are withheld (the rules never count
// a vote from an agent the controller's ring does not name), so early
// detection weakens, silently but for this.
type WatcherMismatch struct {
	// Reporter is the agent's node.
	Reporter string
	// Agent is the agent's --gossip-watchers, Controller the controller's.
	Agent, Controller int
}

func (m WatcherMismatch) Error() string {
	weaker := "it watches more members than the controller hears it for (extra probes and writes)"
	if m.Agent < m.Controller {
		weaker = "the controller waits for votes from watchers that do not watch, so deaths are found later or only at NotReady"
	}
	return fmt.Sprintf("the agent on %s gossips with --gossip-watchers=%d, the controller judges with --gossip-watchers=%d: %s; give both the same value (chart value gossip.watchers sets both)",
		m.Reporter, m.Agent, m.Controller, weaker)
}

// WatcherMismatches lists, by reporter, the fresh gossip reads whose
// agent's watchers differ from o's. A read that does not say (an agent
// older than the field) is not listed.
func (o Options) WatcherMismatches(reports []Report, now time.Time) []WatcherMismatch {
	o = o.WithDefaults()
	var out []WatcherMismatch
	for _, r := range reports {
		g := r.Gossip
		if g == nil || g.Watchers == 0 || g.Watchers == o.Watchers || !freshAt(g.ObservedAt, now, o) {
			continue
		}
		out = append(out, WatcherMismatch{Reporter: r.Reporter, Agent: g.Watchers, Controller: o.Watchers})
	}
	slices.SortFunc(out, func(a, b WatcherMismatch) int { return cmp.Compare(a.Reporter, b.Reporter) })
	return slices.CompactFunc(out, func(a, b WatcherMismatch) bool { return a.Reporter == b.Reporter })
}

// Tracker remembers when this process first saw each node in its current
// Ready state: the clocks of Input.FirstSeen. It starts empty, so a
// controller that restarts during an incident starts every clock again
// from its own first look, the conservative side. One Tracker serves every
// planner of a process, so that they count from the same moment.
type Tracker struct {
	mu   sync.Mutex
	seen map[string]seenState
}

type seenState struct {
	ready bool
	at    time.Time
}

// Observe records the nodes' Ready states at now and returns FirstSeen
// for them (a new map the caller owns). Planners may observe different
// subsets (the peering planner's node selector), so nodes not listed are
// kept: the table holds one small entry per node name ever seen.
func (t *Tracker) Observe(nodes []Node, now time.Time) map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = make(map[string]seenState, len(nodes))
	}
	out := make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		s, ok := t.seen[n.Name]
		if !ok || s.ready != n.Ready {
			s = seenState{ready: n.Ready, at: now}
			t.seen[n.Name] = s
		}
		out[n.Name] = s.at
	}
	return out
}

// Peek returns what Observe(nodes, now) would and records nothing: a node
// not seen before, or seen in the other Ready state, counts from now.
func (t *Tracker) Peek(nodes []Node, now time.Time) map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		if s, ok := t.seen[n.Name]; ok && s.ready == n.Ready {
			out[n.Name] = s.at
		} else {
			out[n.Name] = now
		}
	}
	return out
}

// LeaseTracker records when this process saw each node's Lease renewed:
// the Lease plane of Input.Leases, on rebound's own clock. Feed it every
// Lease the watch delivers; a renewal is a change of renewTime, whatever
// time it names (the kubelet's clock). It starts empty, so a controller
// that restarts takes its first sight of each Lease as a renewal: no node
// looks dead before a whole renew interval of its own watching.
type LeaseTracker struct {
	mu     sync.Mutex
	leases map[string]leaseSeen
}

type leaseSeen struct {
	renewTime time.Time // as the Lease names it: only compared, never used as a time
	lease     Lease
}

// Observe records one Lease of node as seen at now. renewTime is the
// Lease's spec.renewTime (zero when unset), duration its
// spec.leaseDurationSeconds.
func (t *LeaseTracker) Observe(node string, renewTime time.Time, duration time.Duration, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases == nil {
		t.leases = map[string]leaseSeen{}
	}
	s, ok := t.leases[node]
	if !ok || !s.renewTime.Equal(renewTime) {
		// A first sight is no renewal watched: a restarted process must
		// not take every Lease for fresh (FirstSight).
		next := Lease{RenewSeen: now, FirstSight: !ok, Gaps: s.lease.Gaps}
		if ok && now.After(s.lease.RenewSeen) {
			next.addGap(LeaseGap{From: s.lease.RenewSeen, To: now})
		}
		s = leaseSeen{renewTime: renewTime, lease: next}
	}
	// An unset duration says nothing (RenewInterval is zero).
	s.lease.RenewInterval = RenewInterval(duration)
	t.leases[node] = s
}

// Forget drops a node whose Lease was deleted.
func (t *LeaseTracker) Forget(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.leases, node)
}

// Leases returns the Lease plane for Input.Leases: a new map the caller
// owns. A nil tracker has none.
func (t *LeaseTracker) Leases() map[string]Lease {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Lease, len(t.leases))
	for n, s := range t.leases {
		l := s.lease
		l.Gaps = slices.Clone(l.Gaps)
		out[n] = l
	}
	return out
}
