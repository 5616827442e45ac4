package peering

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"rebound/pkg/liveness"
	"rebound/pkg/zone"
)

// LabelKeepInMesh is the per-node opt-out: a node labelled
// peering.rebound.dev/keep-in-mesh=true is never pruned, because it may be
// NotReady in the API while still forwarding (seed 003: "a node could be
// NotReady in the API but potentially still functional").
const LabelKeepInMesh = "peering.rebound.dev/keep-in-mesh"

// Defaults applied by Config.WithDefaults to zero fields.
const (
	// DefaultPruneGracePeriod is how long a node must stay NotReady before it
	// is left out of the mesh. 40 s is the kubelet's default
	// node-monitor-grace-period: a node NotReady for less has often only
	// missed a status update.
	DefaultPruneGracePeriod = 40 * time.Second
	// DefaultFlapWindow is how long a removal counts against a node when the
	// damping rule stretches its next grace period.
	DefaultFlapWindow = 10 * time.Minute
	// DefaultMaxLeaveShare: when more than this share of the set's members
	// would leave in one step without their peers confirming them down, the
	// set is frozen instead; and no more than this share of the set an
	// incident began with leaves during it, however small the steps (the
	// set never collapses).
	DefaultMaxLeaveShare = 0.5
	// DefaultMaxPruneGracePeriod caps the stretched grace period so that a
	// node that flapped and then really died still leaves the mesh before
	// BIRD's default 240 s graceful-restart wait would matter twice over.
	DefaultMaxPruneGracePeriod = 5 * time.Minute
)

// Node is what the planner knows about one Kubernetes node.
type Node struct {
	// Name is the Kubernetes node name; it keys the state and the result.
	Name string
	// Address is the node's BGP address (Calico's projectcalico.org/IPv4Address
	// without the prefix length). A node without a valid address cannot be
	// peered with and is left out with ReasonNoAddress.
	Address netip.Addr
	// Ready is true when the node's Ready condition is True.
	Ready bool
	// LastTransition is the Ready condition's lastTransitionTime: when the
	// node became Ready or NotReady. The prune grace period counts from it.
	LastTransition time.Time
	// KeepInMesh is true when the node carries LabelKeepInMesh=true.
	KeepInMesh bool
	// Port is the node's BGP port (annotation peering.rebound.dev/bgp-port);
	// 0 means 179. Published with the set so agents need not read Nodes.
	Port uint16
}

// KeepInMeshFromLabels reads LabelKeepInMesh the way the planner expects:
// only the exact value "true" opts a node out of pruning.
func KeepInMeshFromLabels(labels map[string]string) bool {
	return labels[LabelKeepInMesh] == "true"
}

// Config tunes the planner. The zero value means "all defaults".
type Config struct {
	// Disabled keeps every node with an address in the mesh: the global
	// opt-out, equivalent to Calico's own full mesh.
	Disabled bool `json:"disabled,omitempty"`
	// PruneGracePeriod is how long a node must be NotReady (and, where
	// session state is known, have no Established session) before it leaves
	// the mesh. Zero means DefaultPruneGracePeriod.
	PruneGracePeriod time.Duration `json:"pruneGracePeriod,omitempty"`
	// FlapWindow is how long a removal is remembered by the damping rule
	// (see PruneGrace). Zero means DefaultFlapWindow.
	FlapWindow time.Duration `json:"flapWindow,omitempty"`
	// MaxPruneGracePeriod caps the grace period stretched by the damping
	// rule. Zero means DefaultMaxPruneGracePeriod; a value below
	// PruneGracePeriod is raised to it.
	MaxPruneGracePeriod time.Duration `json:"maxPruneGracePeriod,omitempty"`
	// NodeGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period: after a stall (every node NotReady, or
	// no Lease renewing) a node not back yet leaves no earlier than this
	// long after the stall's end, as upstream gives every node its grace
	// again then, however short the prune grace period. Zero means
	// zone.DefaultNodeMonitorGracePeriod.
	NodeGracePeriod time.Duration `json:"nodeGracePeriod,omitempty"`
	// MaxLeaveShare, in (0, 1]: when more than this share of the members
	// would leave in one step (not counting those whose peers report them
	// down), nobody leaves and the set is frozen. Zero means
	// DefaultMaxLeaveShare; 1 turns the rule off.
	MaxLeaveShare float64 `json:"maxLeaveShare,omitempty"`
	// Evidence says which agents' reports count (liveness.Assess).
	Evidence EvidenceOptions `json:"evidence,omitzero"`
	// DefaultBGPPort is the port published for a node that has neither
	// the peering.rebound.dev/bgp-port annotation nor an agent report of
	// its listen port (controller --bgp-port); 0 means 179.
	DefaultBGPPort uint16 `json:"defaultBGPPort,omitempty"`
}

// WithDefaults returns c with every zero duration replaced by its default.
func (c Config) WithDefaults() Config {
	if c.PruneGracePeriod <= 0 {
		c.PruneGracePeriod = DefaultPruneGracePeriod
	}
	if c.FlapWindow <= 0 {
		c.FlapWindow = DefaultFlapWindow
	}
	if c.MaxPruneGracePeriod <= 0 {
		c.MaxPruneGracePeriod = DefaultMaxPruneGracePeriod
	}
	if c.MaxPruneGracePeriod < c.PruneGracePeriod {
		c.MaxPruneGracePeriod = c.PruneGracePeriod
	}
	if c.MaxLeaveShare <= 0 {
		c.MaxLeaveShare = DefaultMaxLeaveShare
	}
	if c.NodeGracePeriod <= 0 {
		c.NodeGracePeriod = zone.DefaultNodeMonitorGracePeriod
	}
	c.Evidence = c.Evidence.WithDefaults()
	return c
}

// Validate reports every invalid field by name. Callers validate once at
// start and refuse to run on error; Plan itself never fails and treats a
// negative duration as unset.
func (c Config) Validate() error {
	var errs []error
	check := func(field string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("peering config: %s is %v, must be zero (default) or positive", field, d))
		}
	}
	check("pruneGracePeriod", c.PruneGracePeriod)
	check("flapWindow", c.FlapWindow)
	check("maxPruneGracePeriod", c.MaxPruneGracePeriod)
	if err := c.Evidence.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxLeaveShare < 0 || c.MaxLeaveShare > 1 {
		errs = append(errs, fmt.Errorf("peering config: maxLeaveShare %v: want a share in (0, 1], e.g. 0.5; 0 means the default %v", c.MaxLeaveShare, DefaultMaxLeaveShare))
	}
	if c.MaxPruneGracePeriod > 0 && c.PruneGracePeriod > 0 && c.MaxPruneGracePeriod < c.PruneGracePeriod {
		errs = append(errs, fmt.Errorf("peering config: maxPruneGracePeriod %v is below pruneGracePeriod %v", c.MaxPruneGracePeriod, c.PruneGracePeriod))
	}
	d := c.WithDefaults()
	if d.FlapWindow < d.PruneGracePeriod {
		errs = append(errs, fmt.Errorf("peering config: flapWindow %v is below pruneGracePeriod %v, so no flap would ever be remembered", d.FlapWindow, d.PruneGracePeriod))
	}
	return errors.Join(errs...)
}

// State is what the planner carries from one run to the next. It is plain
// JSON so the controller can keep it in a status field or an annotation and
// recompute the same plan after a restart.
type State struct {
	// Nodes holds one entry per node the planner has seen, by name.
	Nodes map[string]NodeState `json:"nodes,omitempty"`
	// FrozenSince is when the set last froze; zero while it is not
	// frozen.
	FrozenSince time.Time `json:"frozenSince,omitzero"`
	// ThawedAt is when the last freeze ended: a NotReady streak never
	// counts from before it, so nodes that were NotReady through a freeze
	// get a whole grace period after it (a partition healing node by node
	// must not prune the nodes that return last).
	ThawedAt time.Time `json:"thawedAt,omitzero"`
	// Incident is the leave budget of the incident under way; nil while
	// every node is Ready.
	Incident *Incident `json:"incident,omitempty"`
}

// Incident is the memory of the leave budget. An incident begins at the
// first plan that sees a node NotReady and ends at the first that sees
// every node Ready. Leaving the mesh is budgeted against the set it began
// with, as kube-controller-manager rate-limits eviction, so that nodes
// turning NotReady one at a time cannot empty the set in steps each too
// small to freeze it.
type Incident struct {
	// Since is when the incident began.
	Since time.Time `json:"since"`
	// Members are the set's members when it began, sorted: every node the
	// state had in the set, and every node with an address the state did
	// not know (a planner without state starts from the full mesh,
	// upstream's set).
	Members []string `json:"members"`
	// Leaves lists the nodes removed for being NotReady since, once per
	// removal (a record for people; the budget counts who is out now).
	Leaves []string `json:"leaves,omitempty"`
}

// NodeState is one node's published membership and flap history.
type NodeState struct {
	// InSet is true when the node was in the published peer set.
	InSet bool `json:"inSet"`
	// Since is when the planner last added or removed the node, or first
	// left out a node it never published, or first saw a NotReady node
	// without a transition time. It is zero for a node taken into the set
	// on first sight. A NotReady streak never counts from before Since.
	Since time.Time `json:"since,omitzero"`
	// Address is the BGP address the node was published with: when two
	// nodes claim one address, the one already published with it keeps it.
	Address netip.Addr `json:"address,omitzero"`
	// Removals are the times the planner removed the node, oldest first,
	// only those less than FlapWindow old.
	Removals []time.Time `json:"removals,omitempty"`
}

// Input is the snapshot the planner decides from.
type Input struct {
	Nodes []Node
	// Reports are the agents' session reports, unfiltered: the planner
	// applies liveness.Assess's rules itself.
	Reports []Report
	// FirstSeen is when this process first saw each node in its current
	// Ready state (liveness.Tracker); nil for none.
	FirstSeen map[string]time.Time
	// Leases is the Lease plane (liveness.LeaseTracker), nil for none.
	// Without it the gossip plane confirms no death: a gossip quorum alone
	// is one plane, and whoever holds the gossip key can forge it.
	Leases map[string]liveness.Lease
	// Distrust is the history of the planes' disagreements
	// (liveness.DistrustTracker), nil for none kept: a node whose gossip
	// plane lied lately is not found dead by it.
	Distrust *liveness.Distrust
	State    State
	Config   Config
}

// Reason says, as a stable code, why a node is in or out of the set.
type Reason string

// Reasons. The In* reasons mean the node is in the set, the Out* reasons
// that it is not.
const (
	InReady       Reason = "Ready"              // node is Ready
	InDisabled    Reason = "PruningDisabled"    // global opt-out
	InKeepLabel   Reason = "KeepInMeshLabel"    // per-node opt-out
	InGracePeriod Reason = "InGracePeriod"      // NotReady, grace not over yet
	InSessionUp   Reason = "SessionEstablished" // NotReady, but evidence of life (liveness.NodeVerdict.EvidenceOfLife): a session, a witness, its Lease renewing
	InFrozen      Reason = "SetFrozen"          // would leave, but the set is frozen
	InBudget      Reason = "LeaveBudgetSpent"   // would leave, but the incident's leave budget is spent
	OutNotReady   Reason = "NotReadyPastGrace"
	OutNoAddress  Reason = "NoBGPAddress"
	OutDuplicate  Reason = "DuplicateAddress" // another node claims the same address
	OutDeleted    Reason = "NodeDeleted"
)

// In reports whether the reason keeps a node in the set.
func (r Reason) In() bool {
	switch r {
	case InReady, InDisabled, InKeepLabel, InGracePeriod, InSessionUp, InFrozen, InBudget:
		return true
	}
	return false
}

// Peer is one member of the peer set: PublishedPeer, what agents read.
type Peer = PublishedPeer

// Decision is the planner's verdict on one node, with a message for humans.
type Decision struct {
	Name    string `json:"name"`
	InSet   bool   `json:"inSet"`
	Reason  Reason `json:"reason"`
	Message string `json:"message"`
}

// ChangeKind is Added or Removed.
type ChangeKind string

// Change kinds.
const (
	Added   ChangeKind = "Added"
	Removed ChangeKind = "Removed"
)

// Change is one difference between the previous and the new peer set.
type Change struct {
	Name    string     `json:"name"`
	Kind    ChangeKind `json:"kind"`
	Reason  Reason     `json:"reason"`
	Message string     `json:"message"`
}

// Result is the plan: the new peer set and everything needed to act on it,
// explain it, and come back in time.
type Result struct {
	// Peers is the peer set, sorted by node name.
	Peers []Peer `json:"peers"`
	// Decisions has one entry per input node (and per deleted node that was
	// in the set), sorted by name.
	Decisions []Decision `json:"decisions"`
	// Changes lists the nodes added to or removed from the previous set,
	// sorted by name. Empty when the set is unchanged. A node the state
	// does not know was in the previous set if it has an address
	// (Calico's default mesh): keeping it is no change, taking it out a
	// removal.
	Changes []Change `json:"changes,omitempty"`
	// State is what to publish and pass to the next Plan.
	State State `json:"state"`
	// Frozen is true when removals were held back (full disruption, or
	// too large a share leaving at once); FrozenReason says which.
	Frozen       bool   `json:"frozen,omitempty"`
	FrozenReason string `json:"frozenReason,omitempty"`
	// Floor is the smallest set the controller stands behind this step
	// (PeerSet.Floor).
	Floor int `json:"floor"`
	// NextCheck is the earliest time at which Plan could decide differently
	// without any new input (a grace period ends, a removal leaves the flap
	// window). Zero when nothing is pending.
	NextCheck time.Time `json:"nextCheck,omitzero"`
}

// PeerNames returns the names of the peer set, sorted.
func (r Result) PeerNames() []string {
	names := make([]string, len(r.Peers))
	for i, p := range r.Peers {
		names[i] = p.Name
	}
	return names
}
