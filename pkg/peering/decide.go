package peering

import (
	"fmt"
	"time"

	"rebound/pkg/liveness"
)

// decision is one node's verdict plus, for a node in its grace period, the
// time it becomes prunable if nothing else changes.
type decision struct {
	inSet   bool
	reason  Reason
	message string
	pruneAt time.Time
	// streakStart is set when the NotReady streak had no start time at all
	// and now was used; the state keeps it so the streak does not restart.
	streakStart time.Time
}

// nodeRules is what the membership rules read of one node.
type nodeRules struct {
	Config Config
	Node   Node
	// Prev is the node's state after the last plan; Known is false when
	// the last plan never saw the node.
	Prev  NodeState
	Known bool
	// Verdict is the liveness verdict on the node.
	Verdict liveness.NodeVerdict
	// RestartAt: a NotReady streak never counts from before it, the end
	// of a freeze of the set or of a full disruption the planner never
	// saw (see Plan). Zero for none.
	RestartAt time.Time
	// Now is the time of the plan.
	Now time.Time
}

// decide applies the membership rules to one node, first match wins.
func decide(in nodeRules) decision {
	n, v := in.Node, in.Verdict
	switch {
	case !n.Address.IsValid():
		return decision{reason: OutNoAddress, message: "no valid BGP address: nothing to peer with"}
	case in.Config.Disabled:
		return decision{inSet: true, reason: InDisabled, message: "pruning is disabled globally: every node stays in the mesh"}
	case n.KeepInMesh:
		return decision{inSet: true, reason: InKeepLabel, message: fmt.Sprintf("label %s=true keeps the node in the mesh", LabelKeepInMesh)}
	case n.Ready:
		return decision{inSet: true, reason: InReady, message: "node is Ready"}
	}

	// NotReady from here on. Evidence of life (liveness.Rules) keeps a
	// node in, and puts one that left back at once: its kubelet reaching
	// the API (a Lease renewal rebound watched) or a witness that reaches
	// it seeing it alive. A kubelet that reports NotReady itself (a hung
	// container runtime, a CNI config missing for a moment) renews its
	// Lease while BIRD on the node keeps running; Calico's own mesh keeps
	// it. A liar can at most keep a node in, which is upstream's full
	// mesh; it can never take one out. A rejoin is no leave: it spends no
	// budget and never waits for a freeze.
	if why, alive := v.EvidenceOfLife(); alive {
		return decision{inSet: true, reason: InSessionUp, message: "NotReady, but alive: " + why}
	}
	if in.Known && !in.Prev.InSet {
		return decision{reason: OutNotReady, message: fmt.Sprintf("NotReady since %s; out of the mesh since %s", stamp(n.LastTransition), stamp(in.Prev.Since))}
	}
	return decideGrace(in, notReadyStreakOf(in))
}

// notReadyStreak is when a NotReady node's prune grace counts from.
type notReadyStreak struct {
	// start is when the grace counts from.
	start time.Time
	// own is the node's own streak start, before a restart moved it.
	own time.Time
	// assumed is set when the streak had no start time at all and now
	// was used; the state keeps it so the streak does not restart.
	assumed time.Time
}

// notReadyStreakOf: the streak counts from rebound's own first sight of
// the NotReady state (never the kubelet's clock), or from when a quorum
// of live observers' BFD lost the node, if earlier: the API notices only
// after node-monitor-grace-period.
func notReadyStreakOf(in nodeRules) notReadyStreak {
	v := in.Verdict
	start := v.Since
	if v.Verdict == liveness.Dead && !v.DownSince.IsZero() && (start.IsZero() || v.DownSince.Before(start)) {
		start = v.DownSince
	}
	if in.Known && in.Prev.Since.After(start) {
		// Re-added after a removal: the streak cannot predate the rejoin.
		start = in.Prev.Since
	}
	s := notReadyStreak{start: start, own: start}
	if !start.IsZero() && in.RestartAt.After(start) {
		// NotReady through a freeze of the set, or through what may have
		// been a full disruption this planner never saw: the grace
		// counts from its end (see Plan).
		s.start = in.RestartAt
	}
	if s.start.IsZero() {
		// No transition time and never seen before: count from now, and
		// keep it (Since) so the next run counts from the same point.
		s.start, s.assumed = in.Now, in.Now
	}
	return s
}

// decideGrace keeps a NotReady node without evidence of life in the set
// for its prune grace, stretched by its recent removals (damping.go),
// and takes it out after.
func decideGrace(in nodeRules, s notReadyStreak) decision {
	cfg, now := in.Config, in.Now
	removals := recentRemovals(in.Prev.Removals, now, cfg.FlapWindow)
	grace := cfg.PruneGrace(len(removals))
	down := now.Sub(s.start)
	if down >= grace {
		return decision{reason: OutNotReady, message: fmt.Sprintf("NotReady for %s, past the %s grace period, and no live peer has a session with it (%s)", down, grace, in.Verdict.Verdict)}
	}
	msg := fmt.Sprintf("NotReady for %s, within the %s grace period (%d removals in the last %s)", down, grace, len(removals), cfg.FlapWindow)
	if s.start != s.own {
		msg = fmt.Sprintf("NotReady for %s; it leaves no earlier than %s: the set thawed, or the first node Ready now returned (every node may have been NotReady until then), and from then a node not back gets kube-controller-manager's node grace period %s, and at least the %s prune grace period (%d removals in the last %s)",
			now.Sub(s.own), stamp(s.start.Add(grace)), cfg.NodeGracePeriod, grace, len(removals), cfg.FlapWindow)
	}
	return decision{
		inSet:       true,
		reason:      InGracePeriod,
		message:     msg,
		pruneAt:     cfg.pruneTime(s.start, removals, now),
		streakStart: s.assumed,
	}
}
