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
	"maps"
	"net/netip"
	"slices"
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
// with LabelKeepInMesh, or any node when Config.Disabled, stays in. A
// node the state does not know is a member (wasMember: Calico's default
// mesh), so a planner without state never prunes in one step. The set
// never collapses: when every node is NotReady (full disruption: the
// control plane is the likelier side cut off) or more than MaxLeaveShare
// of the members would leave at once without independent evidence of
// their death (a liveness Dead verdict: a BGP quorum, or gossip with the
// Lease stale), nobody leaves and the result is Frozen; and over a whole
// incident no more than MaxLeaveShare of the set it began with leaves,
// confirmed or not (budget.go). Two nodes claiming one address are both left out, unless
// one of them was already published with it (it keeps it). Plan is
// deterministic, and feeding Result.State back with the same input and
// time changes nothing. A node listed twice counts once (the first).
func Plan(in Input, now time.Time) Result {
	p := newPlanFacts(in, now)
	incident := trackIncident(p.nodes, p.prev, now)
	fz := p.settleFreeze()
	decisions := fz.decisions
	if fz.reason != "" {
		decisions = p.holdForFreeze(decisions, fz.reason)
	}
	spendLeaveBudget(p.cfg, p.nodes, p.prev, p.lv, incident, decisions)

	res := Result{
		Frozen:       fz.reason != "",
		FrozenReason: fz.reason,
		State:        State{Nodes: make(map[string]NodeState, len(p.nodes)), FrozenSince: fz.frozenSince, ThawedAt: fz.thawedAt, Incident: incident},
	}
	present := make(map[string]bool, len(p.nodes))
	for i, n := range p.nodes {
		present[n.Name] = true
		d := decisions[i]
		next, change := p.nextNodeState(n, d)
		res.State.Nodes[n.Name] = next
		if change != nil {
			res.Changes = append(res.Changes, *change)
		}
		res.Decisions = append(res.Decisions, Decision{Name: n.Name, InSet: d.inSet, Reason: d.reason, Message: d.message})
		if d.inSet {
			res.Peers = append(res.Peers, p.publishedPeer(n, d))
		}
	}
	res.NextCheck = nextCheck(decisions, p.lv.StaleAt)
	// The floor is never above the set: the budget keeps the set at or
	// above it by construction, so this only matters when members left
	// for reasons outside it (TestPlanStaggeredLeaves checks the budget
	// alone holds it).
	res.Floor = min(floorOf(p.cfg, p.nodes, p.prev, incident, p.dups), len(res.Peers))

	gone := p.deletedNodes(present)
	res.Changes = append(res.Changes, gone.changes...)
	res.Decisions = append(res.Decisions, gone.decisions...)
	maps.Copy(res.State.Nodes, gone.states)

	sort.Slice(res.Decisions, func(i, j int) bool { return res.Decisions[i].Name < res.Decisions[j].Name })
	sort.Slice(res.Changes, func(i, j int) bool { return res.Changes[i].Name < res.Changes[j].Name })
	return res
}

// planFacts are what every step of a plan reads, computed once from the
// input: the nodes deduplicated and sorted, the liveness verdicts, the
// nodes a duplicate address leaves out, and the end of a full disruption
// the nodes record.
type planFacts struct {
	cfg     Config
	nodes   []Node
	reports []Report
	prev    State
	lv      liveness.Assessment
	dups    map[string]string
	// firstReturn is when a full disruption this planner never saw frozen
	// ended, as the nodes record it: the first return
	// (zone.FullDisruptionEnd).
	firstReturn time.Time
	now         time.Time
}

func newPlanFacts(in Input, now time.Time) planFacts {
	cfg := in.Config.WithDefaults()
	nodes := uniqueSortedNodes(in.Nodes)
	return planFacts{
		cfg:         cfg,
		nodes:       nodes,
		reports:     in.Reports,
		prev:        in.State,
		lv:          liveness.Assess(liveness.Input{Nodes: livenessNodes(nodes), Reports: in.Reports, FirstSeen: in.FirstSeen, Leases: in.Leases, Distrust: in.Distrust, Options: cfg.Evidence}, now),
		dups:        duplicateAddresses(nodes, in.State),
		firstReturn: zone.FullDisruptionEnd(nodes, func(n Node) (bool, time.Time) { return n.Ready, n.LastTransition }),
		now:         now,
	}
}

// assessment is the membership rules applied to every node with NotReady
// streaks counted from no earlier than thawedAt, and the counts the
// freeze rule reads.
type assessment struct {
	decisions   []decision // by index of planFacts.nodes
	allNotReady bool
	// leases is the Lease plane: when no Lease renews (Stalled), every
	// kubelet has lost the API, the control plane or its path is the
	// likelier side cut off, and the set freezes as in full disruption,
	// before the Ready flags catch up node by node.
	leases liveness.LeasePlane
	// members counts every member of this step had nobody left: the old
	// members and those joining now, so that re-planning from the result
	// decides the same.
	members int
	// leaving are the members the rules take out; confirmed, those of
	// them liveness judges Dead on independent evidence: a quorum of
	// fresh Ready BGP observers with none up, or a gossip quorum with
	// the Lease stale (never gossip alone, liveness.judgeNotReady).
	leaving, confirmed int
}

func (p planFacts) assess(thawedAt time.Time) assessment {
	a := assessment{decisions: make([]decision, len(p.nodes)), allNotReady: len(p.nodes) > 0, leases: p.lv.LeasePlane()}
	restart := latestOf(thawedAt, p.firstReturn)
	if settle := p.cfg.NodeGracePeriod - p.cfg.PruneGracePeriod; !restart.IsZero() && settle > 0 {
		// After a stall every node gets the node grace period again
		// before it may leave: its streak counts from the end plus what
		// the node grace exceeds the prune grace by.
		restart = restart.Add(settle)
	}
	for i, n := range p.nodes {
		prev, known := p.prev.Nodes[n.Name]
		wasIn := wasMember(n, p.prev)
		if n.Ready {
			a.allNotReady = false
		}
		d := decide(nodeRules{Config: p.cfg, Node: n, Prev: prev, Known: known, Verdict: p.lv.Of(n.Name), RestartAt: restart, Now: p.now})
		if p.dups[n.Name] != "" {
			d = decision{reason: OutDuplicate, message: p.dups[n.Name]}
		}
		a.decisions[i] = d
		if wasIn || d.inSet {
			a.members++
		}
		if wasIn && !d.inSet {
			a.leaving++
			if p.lv.Of(n.Name).Verdict == liveness.Dead {
				a.confirmed++
			}
		}
	}
	return a
}

// freezeReason says why the set must be frozen, "" when it need not be:
// the set never collapses.
func (a assessment) freezeReason(cfg Config) string {
	switch unconfirmed := a.leaving - a.confirmed; {
	case a.allNotReady:
		return fmt.Sprintf("full disruption: all %d nodes are NotReady, so the control plane is the likelier side cut off; nobody leaves the set until a node is Ready again", len(a.decisions))
	case len(a.decisions) > 0 && a.leases.Stalled():
		return fmt.Sprintf("no node's Lease renews on rebound's clock (%d of %d stale): every kubelet has lost the API, so the control plane or its path is the likelier side cut off; nobody leaves the set until a Lease renews", a.leases.Stale, a.leases.Known)
	case float64(unconfirmed) > cfg.MaxLeaveShare*float64(a.members):
		return fmt.Sprintf("%d of the %d members would leave at once without a quorum of live peers confirming them down (BGP sessions, or gossip with their Leases stale), more than the %g share allowed; nobody leaves until fewer would, or their peers report them down", unconfirmed, a.members, cfg.MaxLeaveShare)
	}
	return ""
}

// freezeOutcome is the assessment the plan keeps, whether the set is
// frozen (reason) and the freeze's times for the next state.
type freezeOutcome struct {
	assessment
	reason      string
	frozenSince time.Time
	thawedAt    time.Time
}

// settleFreeze assesses the nodes and decides whether the set is frozen.
// When a freeze ends, the nodes are assessed again with their streaks
// counted from now. A partition heals node by node: the nodes still
// NotReady were NotReady through the freeze, when nobody could tell a
// dead node from a cut-off one, so their grace starts over from the
// thaw, as kube-controller-manager restarts its eviction clocks when a
// full disruption ends. Without this the first nodes back would prune
// the rest a moment before they return.
func (p planFacts) settleFreeze() freezeOutcome {
	a := p.assess(p.prev.ThawedAt)
	out := freezeOutcome{assessment: a, reason: a.freezeReason(p.cfg), thawedAt: p.prev.ThawedAt}
	switch {
	case out.reason != "":
		out.frozenSince = p.prev.FrozenSince
		if out.frozenSince.IsZero() {
			out.frozenSince = p.now
		}
	case !p.prev.FrozenSince.IsZero():
		// The freeze ends now. The new assessment may freeze the set
		// again; it then counts as a new freeze from the next plan on.
		a = p.assess(p.now)
		out = freezeOutcome{assessment: a, reason: a.freezeReason(p.cfg), thawedAt: p.now}
	}
	return out
}

// holdForFreeze keeps in the set, in a new slice, every member the rules
// would take out while the set is frozen for reason (wasMember: those the
// state does not know too), except those with no address or a duplicate
// one (nothing to peer with).
func (p planFacts) holdForFreeze(decisions []decision, reason string) []decision {
	out := slices.Clone(decisions)
	for i, n := range p.nodes {
		if d := out[i]; wasMember(n, p.prev) && !d.inSet && n.Address.IsValid() && d.reason != OutDuplicate {
			out[i] = decision{inSet: true, reason: InFrozen, message: fmt.Sprintf("would leave (%s: %s), but the set is frozen: %s", d.reason, d.message, reason), pruneAt: d.pruneAt}
		}
	}
	return out
}

// nextNodeState is n's state after decision d, and the change to the set
// it makes, if any.
func (p planFacts) nextNodeState(n Node, d decision) (NodeState, *Change) {
	prev, known := p.prev.Nodes[n.Name]
	wasIn := wasMember(n, p.prev)
	next := NodeState{InSet: d.inSet, Since: prev.Since, Removals: recentRemovals(prev.Removals, p.now, p.cfg.FlapWindow)}
	if d.inSet {
		next.Address = n.Address
	}
	var change *Change
	// A node the state does not know was a member (wasMember): the first
	// plan keeping it adds nothing to the mesh, and the first taking it
	// out removes it, a removal the damping counts.
	switch {
	case d.inSet && !wasIn:
		// A rejoin: the streak before any later removal starts here.
		change = &Change{Name: n.Name, Kind: Added, Reason: d.reason, Message: d.message}
		next.Since = p.now
	case !d.inSet && wasIn:
		change = &Change{Name: n.Name, Kind: Removed, Reason: d.reason, Message: d.message}
		next.Since = p.now
		next.Removals = append(next.Removals, p.now)
	case !d.inSet && !known:
		// Never in the mesh (no address to peer with), so not a
		// removal; remember when it was first left out for the message
		// of later runs.
		next.Since = p.now
	}
	if next.Since.IsZero() && !d.streakStart.IsZero() {
		next.Since = d.streakStart
	}
	return next, change
}

// publishedPeer is member n as the set publishes it, with its evidence.
func (p planFacts) publishedPeer(n Node, d decision) Peer {
	peer := Peer{Name: n.Name, Address: n.Address, Port: bgpPort(n, p.reports, p.cfg), Ready: n.Ready, ReadySince: n.LastTransition, Reason: d.reason}
	if v := p.lv.Of(n.Name); !n.Ready {
		// A member a live observer still has a session with is rendered
		// at a BIRD start too: leaving it out would end graceful-restart
		// recovery without it and flush its routes.
		if why, alive := v.EvidenceOfLife(); alive {
			peer.Alive = why
		}
	} else {
		peer.Lost = p.lv.Lost[n.Name]
	}
	return peer
}

// nextCheck is the earliest time a plan could decide differently with no
// new input: a grace period ends, or a report that counts now ages out
// (staleAt). Zero when nothing is pending.
func nextCheck(decisions []decision, staleAt time.Time) time.Time {
	var next time.Time
	for _, d := range decisions {
		next = earliestOf(next, d.pruneAt)
	}
	return earliestOf(next, staleAt)
}

// deletedOutcome is what the plan records of the nodes gone from the
// cluster.
type deletedOutcome struct {
	changes   []Change
	decisions []Decision
	states    map[string]NodeState
}

// deletedNodes: nodes deleted from the cluster (not in present) leave the
// set at once: there is nothing left to wait for, and a deletion is an
// operator's act, not a symptom of a partition (so it never freezes the
// set). Their removals stay on record for the flap window so that
// deleting and re-creating a node cannot reset its damping.
func (p planFacts) deletedNodes(present map[string]bool) deletedOutcome {
	deleted := make([]string, 0)
	for name := range p.prev.Nodes {
		if !present[name] {
			deleted = append(deleted, name)
		}
	}
	sort.Strings(deleted)
	out := deletedOutcome{states: map[string]NodeState{}}
	for _, name := range deleted {
		prev := p.prev.Nodes[name]
		removals := recentRemovals(prev.Removals, p.now, p.cfg.FlapWindow)
		since := prev.Since
		if prev.InSet {
			const msg = "node no longer exists"
			out.changes = append(out.changes, Change{Name: name, Kind: Removed, Reason: OutDeleted, Message: msg})
			out.decisions = append(out.decisions, Decision{Name: name, Reason: OutDeleted, Message: msg})
			removals = append(removals, p.now)
			since = p.now
		}
		if len(removals) > 0 {
			out.states[name] = NodeState{Since: since, Removals: removals}
		}
	}
	return out
}

// wasMember reports whether n was in the set before this plan: as the
// state records it, or, for a node the state does not know (a planner
// installed during an incident, or its ConfigMap and the nodes' labels
// lost), whenever it has an address to peer with. Calico's default mesh
// holds every node without rebound's label, so a fresh state is the full
// mesh, never an empty set: the leaves of the members it does not know go
// through the freeze and the incident's budget like any other.
func wasMember(n Node, st State) bool {
	if prev, known := st.Nodes[n.Name]; known {
		return prev.InSet
	}
	return n.Address.IsValid()
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

// earliestOf is the earlier of a and b, where zero means none.
func earliestOf(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
