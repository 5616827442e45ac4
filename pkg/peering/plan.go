// Package peering decides which nodes belong in the BGP node-to-node mesh.
//
// BIRD in graceful-restart recovery (`bird -R`, as calico-node starts it)
// waits for every configured peer, dead ones included, until its global
// `graceful restart wait` ends (240 s by default); only then does it program
// routes (seed 003). Leaving dead nodes out of the mesh ends that wait as
// soon as the live peers have converged. Leaving out a node that is only
// NotReady in the API but still forwarding would cut live routes, so the
// planner is cautious: a grace period, session state where agents report
// it, flap damping (damping.go), and opt-outs per node and globally.
//
// Plan is a pure function of its input and the time: no client, no logger,
// no clock. The controller gathers nodes and agent reports, calls Plan,
// publishes Result.Peers and Result.State, and comes back at
// Result.NextCheck.
package peering

import (
	"fmt"
	"sort"
	"time"
)

// Plan computes the peer set for the snapshot in at time now.
//
// Invariants (tested): a Ready node with a BGP address is always in the set;
// a NotReady node leaves only after PruneGrace and only while no session is
// reported Established; a node with LabelKeepInMesh, or any node when
// Config.Disabled, stays in. Plan is deterministic: the same input and time
// give the same result, and feeding Result.State back with the same nodes
// and time changes nothing. A node listed twice counts once (the first).
func Plan(in Input, now time.Time) Result {
	cfg := in.Config.WithDefaults()
	nodes := uniqueSortedNodes(in.Nodes)
	sessions := indexSessions(nodes)

	res := Result{State: State{Nodes: make(map[string]NodeState, len(nodes))}}
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		seen[n.Name] = true
		prev, known := in.State.Nodes[n.Name]
		d := decide(cfg, n, prev, known, sessions[n.Name], now)

		next := NodeState{InSet: d.inSet, Since: prev.Since, Removals: recentRemovals(prev.Removals, now, cfg.FlapWindow)}
		wasIn := known && prev.InSet
		switch {
		case d.inSet && !wasIn:
			res.Changes = append(res.Changes, Change{Name: n.Name, Kind: Added, Reason: d.reason, Message: d.message})
			if known {
				// A rejoin: the streak before any later removal starts here.
				next.Since = now
			}
		case !d.inSet && wasIn:
			res.Changes = append(res.Changes, Change{Name: n.Name, Kind: Removed, Reason: d.reason, Message: d.message})
			next.Since = now
			next.Removals = append(next.Removals, now)
		case !d.inSet && !known:
			// Never published, so not a removal; remember when it was first
			// left out for the message of later runs.
			next.Since = now
		}
		if next.Since.IsZero() && !d.streakStart.IsZero() {
			next.Since = d.streakStart
		}
		res.State.Nodes[n.Name] = next
		res.Decisions = append(res.Decisions, Decision{Name: n.Name, InSet: d.inSet, Reason: d.reason, Message: d.message})
		if d.inSet {
			res.Peers = append(res.Peers, Peer{Name: n.Name, Address: n.Address})
		}
		if !d.pruneAt.IsZero() && (res.NextCheck.IsZero() || d.pruneAt.Before(res.NextCheck)) {
			res.NextCheck = d.pruneAt
		}
	}

	// Nodes deleted from the cluster leave the set at once: there is nothing
	// left to wait for. Their removals stay on record for the flap window so
	// that deleting and re-creating a node cannot reset its damping.
	deleted := make([]string, 0)
	for name := range in.State.Nodes {
		if !seen[name] {
			deleted = append(deleted, name)
		}
	}
	sort.Strings(deleted)
	for _, name := range deleted {
		prev := in.State.Nodes[name]
		removals := recentRemovals(prev.Removals, now, cfg.FlapWindow)
		since := prev.Since
		if prev.InSet {
			const msg = "node no longer exists"
			res.Changes = append(res.Changes, Change{Name: name, Kind: Removed, Reason: OutDeleted, Message: msg})
			res.Decisions = append(res.Decisions, Decision{Name: name, Reason: OutDeleted, Message: msg})
			removals = append(removals, now)
			since = now
		}
		if len(removals) > 0 {
			res.State.Nodes[name] = NodeState{Since: since, Removals: removals}
		}
	}
	sort.Slice(res.Decisions, func(i, j int) bool { return res.Decisions[i].Name < res.Decisions[j].Name })
	sort.Slice(res.Changes, func(i, j int) bool { return res.Changes[i].Name < res.Changes[j].Name })
	return res
}

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

// sessionReport summarises what agents say about one node's BGP sessions.
type sessionReport struct {
	known      bool   // some agent reported on this node
	upReporter string // first reporter (by name) of an Established session
}

// decide applies the membership rules to one node, first match wins.
func decide(cfg Config, n Node, prev NodeState, known bool, s sessionReport, now time.Time) decision {
	switch {
	case !n.Address.IsValid():
		return decision{reason: OutNoAddress, message: "no valid BGP address: nothing to peer with"}
	case cfg.Disabled:
		return decision{inSet: true, reason: InDisabled, message: "pruning is disabled globally: every node stays in the mesh"}
	case n.KeepInMesh:
		return decision{inSet: true, reason: InKeepLabel, message: fmt.Sprintf("label %s=true keeps the node in the mesh", LabelKeepInMesh)}
	case n.Ready:
		return decision{inSet: true, reason: InReady, message: "node is Ready"}
	}

	// NotReady from here on.
	if known && !prev.InSet {
		return decision{reason: OutNotReady, message: fmt.Sprintf("NotReady since %s; out of the mesh since %s", stamp(n.LastTransition), stamp(prev.Since))}
	}
	if s.upReporter != "" {
		return decision{inSet: true, reason: InSessionUp, message: fmt.Sprintf("NotReady, but %s reports a BGP session Established with it: still forwarding", s.upReporter)}
	}

	streakStart := n.LastTransition
	if known && prev.Since.After(streakStart) {
		// Re-added after a removal: the streak cannot predate the rejoin.
		streakStart = prev.Since
	}
	var assumedStart time.Time
	if streakStart.IsZero() {
		// No transition time and never seen before: count from now, and
		// keep it (Since) so the next run counts from the same point.
		streakStart, assumedStart = now, now
	}
	removals := recentRemovals(prev.Removals, now, cfg.FlapWindow)
	grace := cfg.PruneGrace(len(removals))
	down := now.Sub(streakStart)
	sessions := "no session state reported"
	if s.known {
		sessions = "no session Established"
	}
	if down < grace {
		return decision{
			inSet:       true,
			reason:      InGracePeriod,
			message:     fmt.Sprintf("NotReady for %s, within the %s grace period (%d removals in the last %s)", down, grace, len(removals), cfg.FlapWindow),
			pruneAt:     cfg.pruneTime(streakStart, removals, now),
			streakStart: assumedStart,
		}
	}
	return decision{reason: OutNotReady, message: fmt.Sprintf("NotReady for %s, past the %s grace period, %s", down, grace, sessions)}
}

// uniqueSortedNodes returns the nodes sorted by name, keeping the first of
// any duplicate name, in a new slice.
func uniqueSortedNodes(in []Node) []Node {
	out := make([]Node, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, n := range in {
		if !seen[n.Name] {
			seen[n.Name] = true
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// indexSessions turns the agents' reports (reporter -> peer -> up) into one
// summary per NotReady node: only those can be pruned, so only their
// sessions matter. A node's sessions are up when any agent, its own or a
// peer's, reports a session with it Established. nodes must be sorted so
// the reporter named in messages is stable.
//
// With a full mesh every agent reports n-1 sessions; looking up the few
// NotReady nodes in each report instead of walking every report keeps a
// 1,000-node plan in milliseconds.
func indexSessions(nodes []Node) map[string]sessionReport {
	idx := make(map[string]sessionReport)
	for _, n := range nodes {
		if !n.Ready {
			idx[n.Name] = sessionReport{}
		}
	}
	if len(idx) == 0 {
		return idx
	}
	note := func(node, reporter string, up bool) {
		r := idx[node]
		r.known = true
		if up && r.upReporter == "" {
			r.upReporter = reporter
		}
		idx[node] = r
	}
	for _, reporter := range nodes {
		if len(reporter.Sessions) == 0 {
			continue
		}
		if _, candidate := idx[reporter.Name]; candidate {
			// The node's own report: any Established session shows it is
			// alive and forwarding.
			anyUp := false
			for _, up := range reporter.Sessions {
				anyUp = anyUp || up
			}
			note(reporter.Name, reporter.Name, anyUp)
		}
		if len(reporter.Sessions) > len(idx) {
			for node := range idx {
				if up, ok := reporter.Sessions[node]; ok {
					note(node, reporter.Name, up)
				}
			}
			continue
		}
		for node, up := range reporter.Sessions {
			if _, candidate := idx[node]; candidate {
				note(node, reporter.Name, up)
			}
		}
	}
	return idx
}

// ValidateNodes reports what Plan would silently work around: duplicate
// names and nodes without a usable BGP address. Controllers log it.
func ValidateNodes(nodes []Node) []error {
	var errs []error
	seen := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		if n.Name == "" {
			errs = append(errs, fmt.Errorf("nodes[%d]: empty name", i))
		}
		if seen[n.Name] {
			errs = append(errs, fmt.Errorf("nodes[%d] %q: duplicate name, only the first is planned", i, n.Name))
		}
		seen[n.Name] = true
		if !n.Address.IsValid() {
			errs = append(errs, fmt.Errorf("nodes[%d] %q: no valid BGP address, left out of the mesh", i, n.Name))
		}
	}
	return errs
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}
