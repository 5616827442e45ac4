package liveness

import (
	"errors"
	"fmt"
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
	// stale; zero means DefaultLeaseMargin. It absorbs the kubelet's
	// jitter and the apiserver's write latency.
	LeaseMargin time.Duration `json:"leaseMargin,omitempty"`
	// Watchers is how many agents watch each member on the gossip ring,
	// and so how many can vote on its death; zero means DefaultWatchers.
	// It must match the agents' --gossip-watchers.
	Watchers int `json:"watchers,omitempty"`
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
	return o
}

// Validate names every negative field.
func (o Options) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"evidence.reportMaxAge", o.ReportMaxAge}, {"evidence.maxClockSkew", o.MaxClockSkew}, {"evidence.holdTime", o.HoldTime}, {"evidence.leaseMargin", o.LeaseMargin}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("peering config: %s is %v, must be zero (default) or positive", f.name, f.d))
		}
	}
	if o.Watchers < 0 || o.Watchers > MaxWatchers {
		errs = append(errs, fmt.Errorf("peering config: evidence.watchers is %d, must be zero (default) or 2 to %d", o.Watchers, MaxWatchers))
	} else if o.Watchers == 1 {
		errs = append(errs, errors.New("peering config: evidence.watchers is 1: a lone watcher would decide a death alone; use 2 or more (0 means the default, 3)"))
	}
	return errors.Join(errs...)
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
		s = leaseSeen{renewTime: renewTime, lease: Lease{RenewSeen: now}}
	}
	// The kubelet renews at a fixed quarter of the duration
	// (NodeLeaseRenewIntervalFraction); an unset duration says nothing.
	s.lease.RenewInterval = duration / 4
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
		out[n] = s.lease
	}
	return out
}
