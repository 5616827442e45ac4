package liveness

import "time"

// The Lease plane's view of the whole cluster. kube-controller-manager
// stops evicting when every node is NotReady, because then the control
// plane, or the path to it, is the likelier side that failed. Its Ready
// flags only say so after its node grace period, and they flip node by
// node, one monitor period apart: a planner that waits for "every node
// NotReady" acts in the seconds before the last flag flips, and again in
// the seconds after the first node is back. rebound's own clock sees the
// same stall earlier and all at once: every kubelet renews its Lease
// every renew interval, so when none is seen renewing for that interval
// plus the margin, no kubelet reaches the API.

// LeasePlane sums up the Lease plane of an assessment.
type LeasePlane struct {
	// Known counts the nodes with a Lease plane (a renewal seen and a
	// renew interval known); Stale those whose Lease is stale on
	// rebound's clock.
	Known, Stale int
	// NextStale is the earliest time a Lease fresh now goes stale without
	// a renewal: the moment the plane may change with no new input.
	NextStale time.Time
}

// LeasePlane counts the Lease plane over every node of the assessment.
func (a Assessment) LeasePlane() LeasePlane { return LeasePlaneOf(a.Nodes, nil) }

// LeasePlaneOf counts the Lease plane over the verdicts of the nodes keep
// accepts (every verdict when keep is nil): a verdict of a node the
// caller does not hold must not end a stall.
func LeasePlaneOf(verdicts map[string]NodeVerdict, keep func(node string) bool) LeasePlane {
	var p LeasePlane
	for name, v := range verdicts {
		if keep != nil && !keep(name) {
			continue
		}
		if v.LeaseStaleAt.IsZero() {
			continue
		}
		p.Known++
		if v.LeaseStale {
			p.Stale++
			continue
		}
		if p.NextStale.IsZero() || v.LeaseStaleAt.Before(p.NextStale) {
			p.NextStale = v.LeaseStaleAt
		}
	}
	return p
}

// Stalled reports a stall of the whole Lease plane: rebound knows at
// least one node's Lease and sees none renewing. That is what a
// control-plane failure, or a cut between every kubelet and the API,
// looks like, and it is what the Ready flags show only a node grace
// period later. While one Lease renews, a node reaches the API, and the
// stall is over (upstream, too, leaves full disruption with the first
// Ready node).
func (p LeasePlane) Stalled() bool { return p.Known > 0 && p.Stale == p.Known }

// LeaseFresh reports whether rebound watched the node's Lease renew within
// its renew interval plus the margin: its kubelet reaches the API now,
// whatever its Ready flag says this millisecond. A first sight is not
// enough.
func (v NodeVerdict) LeaseFresh() bool {
	return !v.LeaseStaleAt.IsZero() && !v.LeaseStale && !v.LeaseFirstSight
}

// LeaseUnconfirmed reports whether the node has a Lease plane that does
// not show its kubelet reaching the API now: stale, or only seen once
// since this process started.
func (v NodeVerdict) LeaseUnconfirmed() bool { return !v.LeaseStaleAt.IsZero() && !v.LeaseFresh() }
