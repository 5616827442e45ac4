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
// no clock. The controller gathers nodes and the agents' reports, calls
// Plan, publishes Result.PeerSet (one document agents watch, peerset.go)
// and the node labels, keeps Result.State, and comes back at
// Result.NextCheck.
package peering

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"rebound/pkg/liveness"
	"rebound/pkg/zone"
)

// Plan computes the peer set for the snapshot in at time now.
//
// Invariants (tested): a Ready node with a BGP address of its own is
// always in the set; a NotReady node leaves only after PruneGrace, counted
// on rebound's own clock (liveness.NodeVerdict.Since), and only while no
// fresh Ready observer reports a live session with it (a veto); a node
// with LabelKeepInMesh, or any node when Config.Disabled, stays in. The
// set never collapses: when every node is NotReady (full disruption: the
// control plane is the likelier side cut off) or more than MaxLeaveShare
// of the members would leave at once without a quorum confirming them
// dead, nobody leaves and the result is Frozen; and over a whole incident
// no more than MaxLeaveShare of the set it began with leaves (budget.go). Two nodes claiming one address are both left out, unless
// one of them was already published with it (it keeps it). Plan is
// deterministic, and feeding Result.State back with the same input and
// time changes nothing. A node listed twice counts once (the first).
func Plan(in Input, now time.Time) Result {
	cfg := in.Config.WithDefaults()
	nodes := uniqueSortedNodes(in.Nodes)
	lv := liveness.Assess(liveness.Input{Nodes: livenessNodes(nodes), Reports: in.Reports, FirstSeen: in.FirstSeen, Options: cfg.Evidence}, now)
	dups := duplicateAddresses(nodes, in.State)
	// A full disruption this planner never saw frozen ends, as the nodes
	// record it, at the first return (zone.FullDisruptionEnd).
	firstReturn := zone.FullDisruptionEnd(nodes, func(n Node) (bool, time.Time) { return n.Ready, n.LastTransition })
	incident := trackIncident(nodes, in.State, now)

	res := Result{State: State{Nodes: make(map[string]NodeState, len(nodes)), ThawedAt: in.State.ThawedAt, Incident: incident}}
	decisions := make([]decision, len(nodes))
	var allNotReady bool
	var prevIn, leaving, confirmed int
	assess := func(thawedAt time.Time) {
		allNotReady = len(nodes) > 0
		prevIn, leaving, confirmed = 0, 0, 0
		for i, n := range nodes {
			prev, known := in.State.Nodes[n.Name]
			wasIn := known && prev.InSet
			if n.Ready {
				allNotReady = false
			}
			d := decide(cfg, n, prev, known, lv.Of(n.Name), latestOf(thawedAt, firstReturn), now)
			if dups[n.Name] != "" {
				d = decision{reason: OutDuplicate, message: dups[n.Name]}
			}
			decisions[i] = d
			if wasIn || d.inSet {
				// The share counts against every member of this step had
				// nobody left: the old members and those joining now, so
				// that re-planning from the result decides the same.
				prevIn++
			}
			if wasIn && !d.inSet {
				leaving++
				if lv.Of(n.Name).Verdict == liveness.Dead {
					confirmed++
				}
			}
		}
	}
	freeze := func() {
		res.Frozen, res.FrozenReason = false, ""
		switch unconfirmed := leaving - confirmed; {
		case allNotReady:
			res.Frozen = true
			res.FrozenReason = fmt.Sprintf("full disruption: all %d nodes are NotReady, so the control plane is the likelier side cut off; nobody leaves the set until a node is Ready again", len(nodes))
		case float64(unconfirmed) > cfg.MaxLeaveShare*float64(prevIn):
			res.Frozen = true
			res.FrozenReason = fmt.Sprintf("%d of the %d members would leave at once without a quorum of live peers confirming them down, more than the %g share allowed; nobody leaves until fewer would, or their peers report them down", unconfirmed, prevIn, cfg.MaxLeaveShare)
		}
	}

	// The set never collapses.
	assess(in.State.ThawedAt)
	freeze()
	switch {
	case res.Frozen:
		res.State.FrozenSince = in.State.FrozenSince
		if res.State.FrozenSince.IsZero() {
			res.State.FrozenSince = now
		}
	case !in.State.FrozenSince.IsZero():
		// The freeze ends now. A partition heals node by node: the nodes
		// still NotReady were NotReady through the freeze, when nobody
		// could tell a dead node from a cut-off one, so their grace
		// starts over from the thaw, as kube-controller-manager restarts
		// its eviction clocks when a full disruption ends. Without this
		// the first nodes back would prune the rest a moment before
		// they return.
		res.State.ThawedAt = now
		assess(now)
		freeze()
	}
	if res.Frozen {
		for i, n := range nodes {
			prev, known := in.State.Nodes[n.Name]
			if d := decisions[i]; known && prev.InSet && !d.inSet && n.Address.IsValid() && d.reason != OutDuplicate {
				decisions[i] = decision{inSet: true, reason: InFrozen, message: fmt.Sprintf("would leave (%s: %s), but the set is frozen: %s", d.reason, d.message, res.FrozenReason), pruneAt: d.pruneAt}
			}
		}
	}
	spendLeaveBudget(cfg, nodes, in.State, lv, incident, decisions)
	res.Floor = floorOf(cfg, nodes, in.State, incident, dups)

	seen := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		seen[n.Name] = true
		prev, known := in.State.Nodes[n.Name]
		wasIn := known && prev.InSet
		d := decisions[i]

		next := NodeState{InSet: d.inSet, Since: prev.Since, Removals: recentRemovals(prev.Removals, now, cfg.FlapWindow)}
		if d.inSet {
			next.Address = n.Address
		}
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
			p := Peer{Name: n.Name, Address: n.Address, Port: bgpPort(n, in.Reports, cfg), Ready: n.Ready, ReadySince: n.LastTransition, Reason: d.reason}
			if v := lv.Of(n.Name); !n.Ready {
				// A member a live observer still has a session with is
				// rendered at a BIRD start too: leaving it out would end
				// graceful-restart recovery without it and flush its
				// routes.
				if v.Verdict == liveness.CutOffFromAPI || v.Veto != "" {
					p.Alive = v.Reason
				}
			} else {
				p.Lost = lv.Lost[n.Name]
			}
			res.Peers = append(res.Peers, p)
		}
		if !d.pruneAt.IsZero() && (res.NextCheck.IsZero() || d.pruneAt.Before(res.NextCheck)) {
			res.NextCheck = d.pruneAt
		}
	}
	if !lv.StaleAt.IsZero() && (res.NextCheck.IsZero() || lv.StaleAt.Before(res.NextCheck)) {
		// A report that counts now ages out then.
		res.NextCheck = lv.StaleAt
	}
	// The floor is never above the set: the budget keeps the set at or
	// above it by construction, so this only matters when members left
	// for reasons outside it (TestPlanStaggeredLeaves checks the budget
	// alone holds it).
	res.Floor = min(res.Floor, len(res.Peers))

	// Nodes deleted from the cluster leave the set at once: there is nothing
	// left to wait for, and a deletion is an operator's act, not a symptom
	// of a partition (so it never freezes the set). Their removals stay on
	// record for the flap window so that deleting and re-creating a node
	// cannot reset its damping.
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

func livenessNodes(nodes []Node) []liveness.Node {
	out := make([]liveness.Node, len(nodes))
	for i, n := range nodes {
		out[i] = liveness.Node{Name: n.Name, Ready: n.Ready, Transition: n.LastTransition}
	}
	return out
}

// PeerSet is the document to publish for this result.
func (r Result) PeerSet(generation int64, now time.Time) PeerSet {
	return PeerSet{
		Version:      PeerSetVersion,
		Generation:   generation,
		PublishedAt:  now,
		Floor:        r.Floor,
		Frozen:       r.Frozen,
		FrozenReason: r.FrozenReason,
		Peers:        append([]PublishedPeer{}, r.Peers...),
	}
}

// duplicateAddresses finds nodes that share a BGP address (a kubelet can
// set its own address annotation, so this may be an attack as much as a
// mistake). A Ready claimant is never left out: a node that writes a
// victim's address into its own annotation must not keep the victim out of
// the mesh, and a session to that address reaches whichever machine holds
// it, so the impostor gains nothing (agents render one peer per address;
// see the agent's currentPeers). The claimant already published with the
// address keeps it too. The NotReady claimants that are neither are left
// out, so that a duplicate never adds a dead peer. The result maps each
// node left out to the message saying why.
func duplicateAddresses(nodes []Node, st State) map[string]string {
	byAddr := map[netip.Addr][]Node{}
	for _, n := range nodes {
		if n.Address.IsValid() {
			byAddr[n.Address] = append(byAddr[n.Address], n)
		}
	}
	out := map[string]string{}
	for addr, claimants := range byAddr {
		if len(claimants) < 2 {
			continue
		}
		var incumbents []string
		for _, n := range claimants {
			if prev := st.Nodes[n.Name]; prev.InSet && prev.Address == addr {
				incumbents = append(incumbents, n.Name)
			}
		}
		for _, n := range claimants {
			if n.Ready || (len(incumbents) == 1 && incumbents[0] == n.Name) {
				continue
			}
			others := make([]string, 0, len(claimants)-1)
			for _, o := range claimants {
				if o.Name != n.Name {
					others = append(others, o.Name)
				}
			}
			msg := fmt.Sprintf("NotReady, and BGP address %s is also claimed by %s: left out so that a duplicate adds no dead peer", addr, strings.Join(others, ", "))
			if len(incumbents) == 1 {
				msg += fmt.Sprintf(" (%s was published with it first and keeps it)", incumbents[0])
			}
			out[n.Name] = msg
		}
	}
	return out
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

// decide applies the membership rules to one node, first match wins.
func decide(cfg Config, n Node, prev NodeState, known bool, v liveness.NodeVerdict, restart, now time.Time) decision {
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
	if v.Verdict == liveness.CutOffFromAPI || v.Veto != "" {
		// A liar can at most keep a node in, which is upstream's full
		// mesh; it can never take one out.
		return decision{inSet: true, reason: InSessionUp, message: "NotReady, but not dead: " + v.Reason}
	}

	// The streak counts from rebound's own first sight of the NotReady
	// state (never the kubelet's clock), or from when a quorum of live
	// observers' BFD lost the node, if earlier: the API notices only after
	// node-monitor-grace-period.
	streakStart := v.Since
	if v.Verdict == liveness.Dead && !v.DownSince.IsZero() && (streakStart.IsZero() || v.DownSince.Before(streakStart)) {
		streakStart = v.DownSince
	}
	if known && prev.Since.After(streakStart) {
		// Re-added after a removal: the streak cannot predate the rejoin.
		streakStart = prev.Since
	}
	own := streakStart
	if !streakStart.IsZero() && restart.After(streakStart) {
		// NotReady through a freeze of the set, or through what may have
		// been a full disruption this planner never saw: the grace
		// counts from its end (see Plan).
		streakStart = restart
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
	if down < grace {
		msg := fmt.Sprintf("NotReady for %s, within the %s grace period (%d removals in the last %s)", down, grace, len(removals), cfg.FlapWindow)
		if streakStart != own {
			msg = fmt.Sprintf("NotReady for %s; the %s grace period (%d removals in the last %s) counts from %s, when the set thawed or the first node Ready now returned (every node may have been NotReady until then), and %s of it has passed",
				now.Sub(own), grace, len(removals), cfg.FlapWindow, stamp(streakStart), down)
		}
		return decision{
			inSet:       true,
			reason:      InGracePeriod,
			message:     msg,
			pruneAt:     cfg.pruneTime(streakStart, removals, now),
			streakStart: assumedStart,
		}
	}
	return decision{reason: OutNotReady, message: fmt.Sprintf("NotReady for %s, past the %s grace period, and no live peer has a session with it (%s)", down, grace, v.Verdict)}
}

// bgpPort is the port published for n, from one place: the node's
// peering.rebound.dev/bgp-port annotation (Node.Port), else the port its
// own agent reports its BIRD listens on (any report of its own, fresh or
// not: it describes the node, it is no evidence of life, and a wrong one
// only costs the node its own sessions), else Config.DefaultBGPPort. 0
// and 179 both publish 0 (BGP's default).
func bgpPort(n Node, reports []Report, cfg Config) uint16 {
	port := n.Port
	if port == 0 {
		for _, r := range reports {
			if r.Reporter == n.Name && r.ListenPort != 0 {
				port = r.ListenPort
				break
			}
		}
	}
	if port == 0 {
		port = cfg.DefaultBGPPort
	}
	if port == 179 {
		return 0
	}
	return port
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

func latestOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
