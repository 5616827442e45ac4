package liveness

import (
	"testing"
	"time"
)

// Attack rows on the Lease plane's view of the whole cluster (LeasePlane,
// Stalled) and on the tracker that feeds it. These rows hold; they are
// kept as regression rows.
func TestLeasePlaneAttack(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	stale := Lease{RenewSeen: now.Add(-time.Minute), RenewInterval: 10 * time.Second}
	fresh := Lease{RenewSeen: now.Add(-time.Second), RenewInterval: 10 * time.Second}
	nodes := func(names ...string) []Node {
		var out []Node
		for _, n := range names {
			out = append(out, Node{Name: n, Ready: true, Transition: now.Add(-time.Hour)})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		nodes    []Node
		leases   map[string]Lease
		known    int
		stalled  bool
		wantNext time.Time // NextStale, zero for none
	}{
		{name: "no Lease plane: no stall", nodes: nodes("a", "b"), known: 0},
		{name: "every Lease stale: stall", nodes: nodes("a", "b"), leases: map[string]Lease{"a": stale, "b": stale}, known: 2, stalled: true},
		{
			name:  "one Lease renews: no stall",
			nodes: nodes("a", "b"), leases: map[string]Lease{"a": stale, "b": fresh}, known: 2,
			wantNext: fresh.RenewSeen.Add(10*time.Second + DefaultLeaseMargin),
		},
		{
			name:  "a node without a Lease does not break the stall",
			nodes: nodes("a", "b", "c"), leases: map[string]Lease{"a": stale, "b": stale}, known: 2, stalled: true,
		},
		{
			name:  "a Lease without a duration says nothing: not known, does not break the stall",
			nodes: nodes("a", "b"), leases: map[string]Lease{"a": stale, "b": {RenewSeen: now}}, known: 1, stalled: true,
		},
		{
			name:  "a fresh Lease with no Node object is not counted",
			nodes: nodes("a", "b"), leases: map[string]Lease{"a": stale, "b": stale, "ghost": fresh}, known: 2, stalled: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Assess(Input{Nodes: tc.nodes, Leases: tc.leases}, now).LeasePlane()
			if p.Known != tc.known || p.Stalled() != tc.stalled || !p.NextStale.Equal(tc.wantNext) {
				t.Errorf("plane %+v stalled=%v, want known %d stalled=%v next %v", p, p.Stalled(), tc.known, tc.stalled, tc.wantNext)
			}
		})
	}
}

// TestLeaseTrackerAttack: a relist after an outage with the same
// renewTime is no renewal (the stall goes on), a renewTime that goes
// backwards (a kubelet clock stepped back) is one, and a restarted
// tracker takes its first sight as one.
func TestLeaseTrackerAttack(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	renew := t0.Add(-time.Hour) // the kubelet's clock
	var tr LeaseTracker
	tr.Observe("a", renew, 40*time.Second, t0)
	tr.Observe("a", renew, 40*time.Second, t0.Add(5*time.Minute)) // relist, same renewTime
	if got := tr.Leases()["a"].RenewSeen; !got.Equal(t0) {
		t.Errorf("relist with the same renewTime: RenewSeen %v, want %v (no renewal)", got, t0)
	}
	tr.Observe("a", renew.Add(-time.Hour), 40*time.Second, t0.Add(6*time.Minute))
	if got := tr.Leases()["a"].RenewSeen; !got.Equal(t0.Add(6 * time.Minute)) {
		t.Errorf("renewTime stepped back: RenewSeen %v, want a renewal at %v", got, t0.Add(6*time.Minute))
	}
	var restarted LeaseTracker
	restarted.Observe("a", renew, 40*time.Second, t0.Add(7*time.Minute))
	if got := restarted.Leases()["a"]; !got.RenewSeen.Equal(t0.Add(7*time.Minute)) || got.RenewInterval != 10*time.Second {
		t.Errorf("first sight: %+v, want a renewal now every 10s", got)
	}
}
