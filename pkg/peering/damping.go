package peering

import "time"

// Flap damping
//
// The rule: a node may leave the mesh only after it has been NotReady,
// without interruption, for
//
//	PruneGrace(k) = min(PruneGracePeriod * 2^k, MaxPruneGracePeriod)
//
// where k is the number of times the planner removed this node in the last
// FlapWindow. The NotReady streak counts from the later of the Ready
// condition's lastTransitionTime and the time the planner last re-added the
// node, so a streak can never start before the rejoin that ended the
// previous removal. Rejoining is never delayed: a Ready node is always in
// the set, because a Ready node left out of the mesh blackholes its pods'
// routes, which is worse than the graceful-restart wait a dead peer costs.
//
// The bound holds per node, for a node that is not deleted and whose
// address, opt-out label and the Config stay the same (those changes act at
// once, by design), when every Plan is given the State returned by the
// previous one. Proof: take removals r1 < r2 < ... < rn of one node that lie
// less than FlapWindow apart. Before ri the node was re-added at some
// ai > r(i-1) and then stayed NotReady for PruneGrace(k) with k >= i-1,
// because r1..r(i-1) are still inside the flap window. So
//
//	rn - r1 >= PruneGrace(1) + PruneGrace(2) + ... + PruneGrace(n-1).
//
// MaxRemovals(d) is the largest n that fits in an interval of length d
// (pieces of one FlapWindow each when d is longer). Additions and removals
// of one node alternate, so an interval holds at most one more addition
// than removals: MaxChanges(d) = 2*MaxRemovals(d) + 1.
//
// With the defaults (40 s, 10 min, 5 min): PruneGrace is 40 s, 80 s,
// 160 s, 300 s, 300 s, ...; MaxChanges(1 min) = 3, MaxChanges(2 min) = 5,
// MaxChanges(10 min) = 9. A node flapping every 10 s is never NotReady for
// 40 s and causes no change at all.

// PruneGrace returns how long a node that was removed k times within the
// flap window must stay NotReady before it is removed again.
func (c Config) PruneGrace(k int) time.Duration {
	c = c.WithDefaults()
	g := c.PruneGracePeriod
	for i := 0; i < k && g < c.MaxPruneGracePeriod; i++ {
		g *= 2
	}
	return min(g, c.MaxPruneGracePeriod)
}

// MaxRemovals returns the most times the planner can remove one node within
// any closed time interval of length d (see the bound above).
func (c Config) MaxRemovals(d time.Duration) int {
	c = c.WithDefaults()
	if d < 0 {
		return 0
	}
	if d < c.FlapWindow {
		// All removals in the interval are less than FlapWindow apart.
		return c.removalsFitting(func(span time.Duration) bool { return span <= d })
	}
	// Cover [s, s+d] with floor(d/W)+1 half-open pieces [s+iW, s+(i+1)W):
	// removals within one piece are less than W apart.
	pieces := int(d/c.FlapWindow) + 1
	perPiece := c.removalsFitting(func(span time.Duration) bool { return span < c.FlapWindow })
	return pieces * perPiece
}

// MaxChanges returns the most set changes (additions plus removals) one node
// can cause within any closed time interval of length d.
func (c Config) MaxChanges(d time.Duration) int {
	if d < 0 {
		return 0
	}
	return 2*c.MaxRemovals(d) + 1
}

// removalsFitting returns the largest n such that the shortest possible span
// of n removals, the sum of PruneGrace(1..n-1), is accepted by fits.
func (c Config) removalsFitting(fits func(span time.Duration) bool) int {
	n := 1
	var span time.Duration
	for {
		next := span + c.PruneGrace(n)
		if !fits(next) {
			return n
		}
		span, n = next, n+1
	}
}

// recentRemovals returns the removals less than window old at now, oldest
// first, in a new slice. Removals in the future (clock skew between runs)
// are kept: they still count against the node.
func recentRemovals(removals []time.Time, now time.Time, window time.Duration) []time.Time {
	var out []time.Time
	for _, r := range removals {
		if now.Sub(r) < window {
			out = append(out, r)
		}
	}
	return out
}

// pruneTime returns the earliest t >= now at which a node NotReady since
// streakStart has been NotReady for PruneGrace(k(t)), where k(t) counts the
// removals less than FlapWindow old at t. k only falls as removals age out,
// so the grace can only shrink; each age-out is a point where it may.
func (c Config) pruneTime(streakStart time.Time, removals []time.Time, now time.Time) time.Time {
	t := now
	for {
		k := 0
		next := time.Time{} // next age-out after t
		for _, r := range removals {
			out := r.Add(c.FlapWindow)
			if out.After(t) {
				k++
				if next.IsZero() || out.Before(next) {
					next = out
				}
			}
		}
		due := streakStart.Add(c.PruneGrace(k))
		if due.Before(t) {
			due = t
		}
		if next.IsZero() || due.Before(next) {
			return due
		}
		t = next
	}
}
