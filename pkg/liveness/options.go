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
}

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
	return o
}

// Validate names every negative field.
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
