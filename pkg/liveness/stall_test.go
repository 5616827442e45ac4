package liveness

import (
	"testing"
	"time"
)

// TestLeaseFirstSight: a restarted tracker's first sight of a Lease is no
// renewal it watched: the Lease is not fresh (no target, no proof of
// life) until it is seen renewing, while staleness still counts from the
// first sight (nothing looks dead before a whole renew interval).
func TestLeaseFirstSight(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var tr LeaseTracker
	renew := t0.Add(-time.Hour)
	tr.Observe("node-1", renew, 40*time.Second, t0)
	tr.Observe("node-1", renew, 40*time.Second, t0.Add(time.Second)) // a relist: no renewal
	verdict := func(now time.Time) NodeVerdict {
		a := Assess(Input{Nodes: []Node{{Name: "node-1", Ready: true}}, Leases: tr.Leases()}, now)
		return a.Of("node-1")
	}
	for _, tc := range []struct {
		name                    string
		now                     time.Time
		fresh, unconfirmed, old bool
	}{
		{"first sight, within the interval: neither fresh nor stale", t0.Add(5 * time.Second), false, true, false},
		{"first sight, exactly at its stale time: stale", t0.Add(12 * time.Second), false, true, true},
	} {
		v := verdict(tc.now)
		if v.LeaseFresh() != tc.fresh || v.LeaseUnconfirmed() != tc.unconfirmed || v.LeaseStale != tc.old {
			t.Errorf("%s: fresh %v unconfirmed %v stale %v, want %v %v %v", tc.name, v.LeaseFresh(), v.LeaseUnconfirmed(), v.LeaseStale, tc.fresh, tc.unconfirmed, tc.old)
		}
	}
	tr.Observe("node-1", renew.Add(10*time.Second), 40*time.Second, t0.Add(6*time.Second)) // a renewal watched
	if v := verdict(t0.Add(7 * time.Second)); !v.LeaseFresh() || v.LeaseUnconfirmed() || v.LeaseFirstSight {
		t.Errorf("after a renewal watched: fresh %v unconfirmed %v first sight %v, want fresh", v.LeaseFresh(), v.LeaseUnconfirmed(), v.LeaseFirstSight)
	}
	if p := (Assessment{Nodes: map[string]NodeVerdict{"node-1": verdict(t0.Add(7 * time.Second))}}).LeasePlane(); p.Known != 1 || p.Stale != 0 || p.Stalled() {
		t.Errorf("Lease plane %+v, want one known, none stale", p)
	}
}
