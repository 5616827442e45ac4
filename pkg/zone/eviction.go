package zone

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// TaintPassPeriod is how often upstream's doNoExecuteTaintingPass drains the
// zone queues (scheduler.NodeEvictionPeriod in
// pkg/controller/nodelifecycle/scheduler/rate_limited_queue.go).
const TaintPassPeriod = 100 * time.Millisecond

// ModeChange says whether a pass entered or left upstream's "master
// disruption mode", in which every zone is FullDisruption and all NoExecute
// tainting is stopped.
type ModeChange int

const (
	// NoModeChange: the pass neither entered nor left the mode.
	NoModeChange ModeChange = iota
	// EnteredFullDisruptionMode: every counted zone became FullDisruption.
	// Upstream then removes the not-ready and unreachable NoExecute taints
	// from EVERY node (markNodeAsReachable), which cancels pending pod
	// evictions, and sets every zone's rate to 0.
	EnteredFullDisruptionMode
	// ExitedFullDisruptionMode: some node is Ready again. Upstream resets
	// every node's probe and ready-transition timestamps, so each NotReady
	// node gets a whole --node-monitor-grace-period again before it is
	// queued for tainting, and sets each zone's rate from its new state.
	ExitedFullDisruptionMode
)

// String names the change.
func (m ModeChange) String() string {
	switch m {
	case NoModeChange:
		return "NoModeChange"
	case EnteredFullDisruptionMode:
		return "EnteredFullDisruptionMode"
	case ExitedFullDisruptionMode:
		return "ExitedFullDisruptionMode"
	default:
		return fmt.Sprintf("ModeChange(%d)", int(m))
	}
}

// ZoneResult is the model's view of one zone after a pass.
type ZoneResult struct {
	// Zone is the zone key (see ZoneKey; DisplayZone prints it).
	Zone string
	// State is the zone's state as the controller holds it.
	State State
	// NotReady and Total count the zone's nodes without the
	// exclude-disruption label; Total is also the zone size the
	// large-cluster rule reads.
	NotReady, Total int
	// Excluded counts the zone's nodes with the exclude-disruption label.
	// They are not counted, but they are still queued and tainted at Rate.
	Excluded int
	// Rate is the NoExecute-tainting rate in force for the zone's queue, in
	// nodes per second, with burst 1. 0 means no NotReady node of the zone
	// is tainted, so no pod is evicted from it.
	Rate float64
	// StateReason explains State; RateReason explains Rate. RateReason is
	// carried over while the state does not change, because upstream only
	// swaps a zone's limiter on a state change.
	StateReason, RateReason string
}

// Cluster is the model's view of all zones after a pass.
type Cluster struct {
	// Zones lists every zone that has at least one node, sorted by key.
	Zones []ZoneResult
	// FullDisruptionMode is true while upstream's master disruption mode is
	// in force: every counted zone is FullDisruption and every rate is 0.
	FullDisruptionMode bool
	// ModeChange says whether this pass entered or left that mode.
	ModeChange ModeChange
}

// Zone returns the result for a zone key.
func (c Cluster) Zone(key string) (ZoneResult, bool) {
	i, ok := slices.BinarySearchFunc(c.Zones, key, func(z ZoneResult, k string) int {
		return strings.Compare(z.Zone, k)
	})
	if !ok {
		return ZoneResult{}, false
	}
	return c.Zones[i], true
}

// Evaluate computes every zone's state and NoExecute-tainting rate for a
// snapshot of all the cluster's nodes, as a freshly started (or newly
// elected) kube-controller-manager settles on it. It is Advance from an empty
// Cluster; upstream's second pass over the same snapshot changes nothing.
func Evaluate(nodes []NodeInfo, cfg Config) Cluster {
	return Advance(Cluster{}, nodes, cfg)
}

// Advance models one monitorNodeHealth pass of a running controller: it
// takes the previous result and the current snapshot and mirrors, rule for
// rule, addPodEvictorForNewZone, handleDisruption and setLimiterInZone:
//
//   - a zone seen for the first time starts Initial with a limiter at
//     --node-eviction-rate (addPodEvictorForNewZone);
//   - each zone's new state comes from ComputeZoneState over its nodes
//     without the exclude-disruption label;
//   - if every counted zone is now FullDisruption and was not all
//     FullDisruption before, the controller enters master disruption mode:
//     every zone becomes FullDisruption with rate 0;
//   - if every counted zone was FullDisruption and now some is not, it exits
//     the mode: every zone takes its new state and the rate setLimiterInZone
//     gives that state;
//   - otherwise each zone whose state changed takes the rate
//     setLimiterInZone gives its new state: Normal and FullDisruption get
//     --node-eviction-rate (HealthyQPSFunc), PartialDisruption gets
//     ReducedQPSFunc(zone size). A zone whose state did not change keeps its
//     rate, even if its size crossed --large-cluster-size-threshold;
//   - if every counted zone was and still is FullDisruption, nothing changes.
//
// A zone whose nodes all carry the exclude-disruption label is reported
// Initial at --node-eviction-rate: upstream drops it from its zone states in
// handleDisruption and recreates it, with a fresh limiter, in the next pass.
// (Which passes drop it depends on Go map order; the model reports the
// recreated zone.) Such a zone does not count towards "every zone".
func Advance(prev Cluster, nodes []NodeInfo, cfg Config) Cluster {
	zones := groupByZone(nodes)
	threshold := cfg.threshold32()

	var prevByZone map[string]*ZoneResult
	if len(prev.Zones) > 0 {
		prevByZone = make(map[string]*ZoneResult, len(prev.Zones))
		for i := range prev.Zones {
			prevByZone[prev.Zones[i].Zone] = &prev.Zones[i]
		}
	}

	// newStates[i] is what ComputeZoneState says for zones[i]; zones[i].State
	// and .Rate hold the controller's previous view until handleDisruption
	// below decides. A zone upstream does not know yet starts Initial at the
	// normal rate (addPodEvictorForNewZone).
	newStates := make([]State, len(zones))
	counted := 0
	allAre, allWas := true, true
	for i := range zones {
		z := &zones[i]
		z.State, z.Rate = Initial, cfg.EvictionLimiterQPS
		z.RateReason = fmt.Sprintf("new zone: limiter created at --node-eviction-rate %g/s", cfg.EvictionLimiterQPS)
		if p, ok := prevByZone[z.Zone]; ok {
			z.State, z.Rate, z.RateReason = p.State, p.Rate, p.RateReason
		}
		ready := z.Total - z.NotReady
		newStates[i] = computeState(ready, z.NotReady, threshold)
		z.StateReason = stateReason(newStates[i], z.NotReady, z.Total, z.Excluded, cfg.UnhealthyZoneThreshold)
		if z.Total == 0 {
			// Not in zoneToNodeConditions: dropped by handleDisruption,
			// recreated by addPodEvictorForNewZone.
			z.State, z.Rate = Initial, cfg.EvictionLimiterQPS
			z.RateReason = fmt.Sprintf("no counted node: upstream recreates this zone's limiter at --node-eviction-rate %g/s on each pass that drops the zone", cfg.EvictionLimiterQPS)
			continue
		}
		counted++
		if newStates[i] != FullDisruption {
			allAre = false
		}
		if z.State != FullDisruption {
			allWas = false
		}
	}

	out := Cluster{Zones: zones}
	switch {
	case allAre && allWas:
		// handleDisruption does nothing: states and limiters stay.
		out.FullDisruptionMode = prev.FullDisruptionMode && counted > 0
	case allAre:
		// "Entering master disruption mode": stop all evictions.
		out.FullDisruptionMode = true
		out.ModeChange = EnteredFullDisruptionMode
		for i := range zones {
			if zones[i].Total == 0 {
				continue
			}
			zones[i].State, zones[i].Rate = FullDisruption, 0
			zones[i].RateReason = "every zone is FullDisruption: kube-controller-manager stops all NoExecute tainting (rate 0) and removes existing not-ready/unreachable taints"
		}
	default:
		// allWas: "Exiting master disruption mode", every limiter is reset.
		// Otherwise only zones whose state changed get a new limiter.
		if allWas {
			out.ModeChange = ExitedFullDisruptionMode
		}
		for i := range zones {
			z := &zones[i]
			if z.Total == 0 || (!allWas && z.State == newStates[i]) {
				continue
			}
			z.State = newStates[i]
			z.Rate, z.RateReason = limiterFor(z.State, z.Total, cfg)
		}
	}
	return out
}

// limiterFor mirrors upstream (*Controller).setLimiterInZone for a counted
// zone: the rate its limiter is swapped to, and why.
func limiterFor(s State, zoneSize int, cfg Config) (float64, string) {
	switch s {
	case Normal:
		return cfg.EvictionLimiterQPS, fmt.Sprintf("Normal: --node-eviction-rate %g/s", cfg.EvictionLimiterQPS)
	case PartialDisruption:
		rate := cfg.reducedQPS(zoneSize)
		if int32(zoneSize) > cfg.LargeClusterSizeThreshold {
			return rate, fmt.Sprintf("PartialDisruption in a zone of %d counted nodes > --large-cluster-size-threshold %d: --secondary-node-eviction-rate %g/s",
				zoneSize, cfg.LargeClusterSizeThreshold, rate)
		}
		return rate, fmt.Sprintf("PartialDisruption in a zone of %d counted nodes <= --large-cluster-size-threshold %d (a per-zone size): NoExecute tainting stopped (rate 0)",
			zoneSize, cfg.LargeClusterSizeThreshold)
	case FullDisruption:
		rate := cfg.healthyQPS(zoneSize)
		return rate, fmt.Sprintf("FullDisruption while another zone is not: --node-eviction-rate %g/s", rate)
	default:
		// setLimiterInZone has no case for Initial; unreachable for a
		// counted zone.
		return cfg.EvictionLimiterQPS, "Initial: limiter unchanged"
	}
}

// groupByZone counts nodes per zone, mirroring the zoneToNodeConditions map
// of monitorNodeHealth (excluded nodes are counted apart). The result is
// sorted by zone key.
func groupByZone(nodes []NodeInfo) []ZoneResult {
	var zones []ZoneResult
	index := make(map[string]int, 4)
	for i := range nodes {
		n := &nodes[i]
		j, ok := index[n.Zone]
		if !ok {
			j = len(zones)
			index[n.Zone] = j
			zones = append(zones, ZoneResult{Zone: n.Zone})
		}
		z := &zones[j]
		switch {
		case n.ExcludedFromDisruption:
			z.Excluded++
		case n.Ready:
			z.Total++
		default:
			z.Total++
			z.NotReady++
		}
	}
	slices.SortFunc(zones, func(a, b ZoneResult) int { return strings.Compare(a.Zone, b.Zone) })
	return zones
}

// EvictionETA estimates when a NotReady node will get its NoExecute taint,
// given its zone's Rate and the number of nodes queued ahead of it in that
// zone's queue. It returns the earliest and latest delay, and ok=false when
// the node is never tainted (rate 0, negative or NaN) or the delay does not
// fit a time.Duration.
//
// The model: upstream keeps one RateLimitedTimedQueue per zone, ordered by
// the time each node was added (when the controller first saw it NotReady or
// Unknown without the matching taint), drained every TaintPassPeriod through
// a token bucket of rate Rate and burst 1 (scheduler.EvictionRateLimiterBurst).
// Each node ahead uses one token. With a token available now, the node is
// tainted after ahead/Rate (earliest); with an empty bucket, after
// (ahead+1)/Rate plus one TaintPassPeriod (latest).
//
// Limits, all of which make the real delay longer or the answer stale:
//   - the delay runs from now for a node already queued; a node is queued
//     only after --node-monitor-grace-period without status or Lease
//     renewal, and exiting full disruption mode restarts that grace period;
//   - upstream also spends a token on a queued node that became Ready again
//     before its turn, and on every failed taint attempt (retried after
//     50 ms), so tokens may go to nodes not counted in ahead;
//   - the rate changes when the zone changes state (Advance); the swap keeps
//     an empty bucket empty (RateLimitedTimedQueue.SwapLimiter);
//   - entering full disruption mode removes taints already applied;
//   - the taint is not the eviction: a pod is deleted when its toleration
//     for the taint runs out (tolerationSeconds, 300 s by default through
//     the DefaultTolerationSeconds admission plugin);
//   - with --node-eviction-rate 0 a new zone's first limiter still holds
//     one token (a token bucket of rate 0 starts full), so one node per zone
//     can be tainted; the model says never.
func EvictionETA(rate float64, ahead int) (earliest, latest time.Duration, ok bool) {
	if math.IsNaN(rate) || rate <= 0 {
		return 0, 0, false
	}
	if ahead < 0 {
		ahead = 0
	}
	first := float64(ahead) / rate
	last := float64(ahead+1)/rate + TaintPassPeriod.Seconds()
	if last*float64(time.Second) >= math.MaxInt64 {
		return 0, 0, false
	}
	return seconds(first), seconds(last), true
}

// seconds converts a non-negative, in-range number of seconds to a Duration.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// FullDisruptionEnd is the earliest Ready transition among the nodes that
// are Ready: the end of the last full disruption as the Node objects
// themselves record it, or earlier. readySince reads one node (as
// kubestatus.NodeReadySince does). Every Ready node's last transition was out of
// NotReady, so just before this time no node now Ready was in its current
// Ready spell, and a node NotReady since before it may have been NotReady
// together with all of them: a full disruption that a planner never saw
// (it restarted, or was cut off from the apiserver with the nodes, as an
// in-cluster controller is in a control-plane partition). rebound's clocks
// for such a node (pkg/rescue's maxUnavailableTime, pkg/peering's prune
// grace) start here, as kube-controller-manager restarts its own when a
// full disruption ends. That only ever starts a clock later; in a healthy
// cluster some node has been Ready for long and the time is older than any
// current NotReady spell. Zero when no node is Ready or a Ready node has no
// transition time.
func FullDisruptionEnd[N any](nodes []N, readySince func(N) (ready bool, since time.Time)) time.Time {
	var first time.Time
	for _, n := range nodes {
		ready, since := readySince(n)
		if !ready {
			continue
		}
		if since.IsZero() {
			return time.Time{}
		}
		if first.IsZero() || since.Before(first) {
			first = since
		}
	}
	return first
}
