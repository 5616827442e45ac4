package diagnose

import (
	"rebound/pkg/liveness"
	"time"
)

// SchemaVersion is the version of the JSON form of Report
// (docs/diagnose.md). Fields may be added without a change; a field is
// renamed, removed or changes meaning only with a new version.
const SchemaVersion = 1

// Impact ranks a finding.
type Impact string

const (
	// ImpactBlocking: recovery will not happen without a person, rebound or
	// a dead node coming back (a stranded pod nobody moves, a workload
	// whose pods cannot run, a node's routes held by a dead BGP peer).
	// Any blocking finding makes Report.Blocking true and the exit code 1.
	ImpactBlocking Impact = "Blocking"
	// ImpactPending: recovery is under way or comes at a known time
	// (upstream eviction, rebound's deadline, a replacement starting).
	ImpactPending Impact = "Pending"
	// ImpactInfo: context worth knowing that holds nothing up (a zone
	// state, DaemonSet pods that return with their node, a rescue done).
	ImpactInfo Impact = "Info"
)

// rank orders impacts, most severe first.
func (i Impact) rank() int {
	switch i {
	case ImpactBlocking:
		return 0
	case ImpactPending:
		return 1
	default:
		return 2
	}
}

// Report is what `rebound diagnose` finds. Its JSON form is documented in
// docs/diagnose.md.
type Report struct {
	SchemaVersion int `json:"schemaVersion"`
	// Time is the moment the cluster was read (the snapshot's Now).
	Time time.Time `json:"time"`
	// Blocking is true when any finding has ImpactBlocking.
	Blocking bool `json:"blocking"`
	// Summary is one line for people.
	Summary string `json:"summary"`
	// Findings is every problem, ranked by impact: blocking first, then
	// pending, then info; within one impact, workloads and pods before
	// BGP before zones, the oldest first.
	Findings []Finding `json:"findings"`
	// ZoneConfig is the kube-controller-manager configuration the zone
	// model assumed (the --unhealthy-zone-threshold etc. flags).
	ZoneConfig ZoneConfig `json:"zoneConfig"`
	// FullDisruptionMode is true when every zone is FullDisruption:
	// kube-controller-manager then stops all NoExecute tainting.
	FullDisruptionMode bool   `json:"fullDisruptionMode"`
	Zones              []Zone `json:"zones"`
	// CriticalPods lists every pod a RecoveryPolicy makes critical that is
	// bound to a NotReady node, or to a node the API still has Ready that
	// is dead on both planes and that a TwoPlanes policy examines, with
	// rebound's decision about it.
	CriticalPods []CriticalPod `json:"criticalPods"`
	// Workloads lists the Deployments, StatefulSets and DaemonSets whose
	// status is not Available.
	Workloads []Workload `json:"workloads"`
	// Liveness is pkg/liveness's verdict on each NotReady node (the one
	// model the controller's planners read), sorted by node. diagnose has
	// no observation history, so its clocks are the API's transitions.
	Liveness []NodeLiveness `json:"liveness"`
	// Unreachable lists the nodes rebound marks, or would mark, dead on
	// both planes (rebound.dev/unreachable), sorted by node.
	Unreachable []UnreachableNode `json:"unreachable"`
	// Fencing is watchdog self-fencing per node (docs/fencing.md): every
	// node whose agent reports fencing or that carries
	// node.kubernetes.io/out-of-service. Absent when there is none.
	Fencing *Fencing `json:"fencing,omitempty"`
	// EarlyDetection says which nodes the API has Ready could not be
	// found dead early, on both planes, and why.
	EarlyDetection EarlyDetection `json:"earlyDetection"`
	BGP            BGP            `json:"bgp"`
	// Policies are the RecoveryPolicies the plan used.
	Policies []Policy `json:"policies"`
	// Warnings are problems with the input itself (an invalid policy, the
	// CRD missing, a bad zone configuration).
	Warnings []string `json:"warnings"`
}

// NodeLiveness is the verdict, with its evidence, of one node that is not
// plainly Alive: NotReady, or Ready with a stale Lease.
type NodeLiveness struct {
	Node string `json:"node"`
	// Verdict is CutOffFromAPI, Dead or Unknown.
	Verdict string `json:"verdict"`
	// ReadyInAPI: the API has the node Ready (its Lease is stale, or it
	// is dead on both planes); Since is when it entered its Ready state
	// (omitted when unknown).
	ReadyInAPI bool      `json:"readyInAPI,omitempty"`
	Since      time.Time `json:"since,omitzero"`
	// Veto names the live observer whose session keeps the node in the
	// mesh, if any.
	Veto      string `json:"veto,omitempty"`
	Observers int    `json:"observers"`
	DownVotes int    `json:"downVotes"`
	UpVotes   int    `json:"upVotes"`
	// The Lease plane: how long ago the node's Lease was renewed (by its
	// renewTime: diagnose has no observation history), and whether that
	// is past its renew interval plus the margin. Absent without a Lease.
	LeaseAge   *Seconds `json:"leaseAgeSeconds,omitempty"`
	LeaseStale bool     `json:"leaseStale,omitempty"`
	// The gossip plane: the node's watchers on the agents' ring and how
	// many of them say dead or alive.
	GossipWatchers int `json:"gossipWatchers,omitempty"`
	GossipDown     int `json:"gossipDown,omitempty"`
	GossipUp       int `json:"gossipUp,omitempty"`
	// Early: dead on both planes while the API still has it Ready.
	Early  bool   `json:"early,omitempty"`
	Reason string `json:"reason"`
}

// Seconds is a duration in seconds, to one decimal.
type Seconds float64

// Finding is one problem, in words, with where to look.
type Finding struct {
	Impact Impact `json:"impact"`
	// Kind is what the finding is about: Workload, CriticalPod,
	// BGPPeerWait, BGPReport, BGPLeftOut, Zone.
	Kind string `json:"kind"`
	// Object names it: "Deployment kube-system/coredns", "Pod ns/name",
	// "Node node-1", "Zone region/zone".
	Object string `json:"object"`
	// Cause is the cause, first thing first, in one sentence.
	Cause string `json:"cause"`
	// Rebound says what rebound does about it, or why it does nothing;
	// empty when rebound has no part in it.
	Rebound string `json:"rebound,omitempty"`
	// Since is when the problem started, when known.
	Since *time.Time `json:"since,omitempty"`
}

// ZoneConfig is zone.Config in JSON.
type ZoneConfig struct {
	UnhealthyZoneThreshold         float64 `json:"unhealthyZoneThreshold"`
	LargeClusterSizeThreshold      int32   `json:"largeClusterSizeThreshold"`
	NodeEvictionRate               float64 `json:"nodeEvictionRate"`
	SecondaryNodeEvictionRate      float64 `json:"secondaryNodeEvictionRate"`
	ReplacementTimeoutSeconds      float64 `json:"replacementTimeoutSeconds"`
	SessionReportMaxAgeSeconds     float64 `json:"sessionReportMaxAgeSeconds"`
	PeeringPruneGracePeriodSeconds float64 `json:"peeringPruneGracePeriodSeconds"`
}

// Zone is one zone as kube-controller-manager's node lifecycle controller
// computes it (pkg/zone), with the numbers that put it there.
type Zone struct {
	// Zone is "region/zone", or "(no zone)" for nodes without zone labels.
	Zone string `json:"zone"`
	// State is Initial, Normal, PartialDisruption or FullDisruption.
	State string `json:"state"`
	// NotReady and Total count the zone's nodes without the
	// node.kubernetes.io/exclude-disruption label; Excluded counts those
	// with it.
	NotReady int `json:"notReady"`
	Total    int `json:"total"`
	Excluded int `json:"excluded"`
	// NotReadyFraction is NotReady/Total (0 for an empty zone), compared
	// with UnhealthyZoneThreshold when NotReady > 2.
	NotReadyFraction       float64 `json:"notReadyFraction"`
	UnhealthyZoneThreshold float64 `json:"unhealthyZoneThreshold"`
	// LargeZone is Total > LargeClusterSizeThreshold: in PartialDisruption
	// a large zone is still tainted at --secondary-node-eviction-rate, a
	// small one not at all.
	LargeZone                 bool  `json:"largeZone"`
	LargeClusterSizeThreshold int32 `json:"largeClusterSizeThreshold"`
	// EvictionRate is the NoExecute-tainting rate in force, in nodes per
	// second; 0 means pods on its NotReady nodes are never evicted.
	EvictionRate float64 `json:"evictionRate"`
	StateReason  string  `json:"stateReason"`
	RateReason   string  `json:"rateReason"`
	// NotReadyNodes names the zone's NotReady nodes, sorted.
	NotReadyNodes []string `json:"notReadyNodes"`
}

// CriticalPod is a critical pod on a NotReady node, as rescue.PlanFor
// decided about it.
type CriticalPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	Zone      string `json:"zone"`
	ZoneState string `json:"zoneState"`
	// Workload is the owner that decides the safety rule.
	Workload WorkloadRef `json:"workload"`
	Policy   string      `json:"policy"`
	// NotReadySince is when the node stopped being Ready, omitted while
	// the API still has it Ready (ReadyInAPI). DetectedAt is when it was
	// found dead on both planes, for a TwoPlanes policy (omitted
	// otherwise). Deadline is the later of the two (the clock's start) +
	// the policy's maxUnavailableTime.
	NotReadySince time.Time `json:"notReadySince,omitzero"`
	ReadyInAPI    bool      `json:"readyInAPI,omitempty"`
	DetectedAt    time.Time `json:"detectedAt,omitzero"`
	Deadline      time.Time `json:"deadline"`
	Terminating   bool      `json:"terminating"`
	// DeletedBy says who deleted a terminating pod, by the records.
	DeletedBy *DeletedBy `json:"deletedBy,omitempty"`
	// UpstreamEviction is when kube-controller-manager evicts the pod on
	// its own; null means never (or moot, for a terminating pod).
	UpstreamEviction *time.Time `json:"upstreamEviction"`
	// UpstreamEstimated: UpstreamEviction comes from the zone's tainting
	// rate, not from a taint already on the node.
	UpstreamEstimated bool `json:"upstreamEstimated"`
	// Upstream is the short answer ("never: zone a/b in
	// PartialDisruption", "at 2025-01-01T10:00:00Z"); UpstreamReason the
	// planner's full explanation.
	Upstream       string `json:"upstream"`
	UpstreamReason string `json:"upstreamReason"`
	// Stranded: NotReady for at least maxUnavailableTime and upstream will
	// not move it by then.
	Stranded bool `json:"stranded"`
	// Decision is rescue.PlanFor's: Skip, NotYet, LeftToUpstream, Act,
	// InFlight, Replaced, WaitingForFencing, ReportOnly, Suspended,
	// RateLimited, NoTarget, Held. Action is the action planned now (Delete, ForceDelete,
	// ScaleDown), DryRun whether it is only a dry run.
	Decision string `json:"decision"`
	// NodeAlive is the second liveness signal's evidence that the node is
	// alive but cut off from the API (rescue.Snapshot.BGPAlive), if any.
	NodeAlive string `json:"nodeAlive,omitempty"`
	Action    string `json:"action,omitempty"`
	DryRun    bool   `json:"dryRun,omitempty"`
	// Reason is the planner's reason, the words of rebound's Event.
	Reason string `json:"reason"`
}

// DeletedBy is who deleted a terminating pod (rescue.DeletedBy): what
// rebound's own Events and status.lastActions records say, else
// kube-controller-manager where its taint and the pod's toleration made
// the eviction due, else not rebound.
type DeletedBy struct {
	// Actor is "rebound", "TaintEviction" or "PodGC"
	// (kube-controller-manager's), or "NotRebound" (upstream taint
	// eviction or another actor: no record of rebound's names it).
	Actor string `json:"actor"`
	// RequestedAt is when the deletion was asked for.
	RequestedAt time.Time `json:"requestedAt"`
	Evidence    string    `json:"evidence"`
}

// WorkloadRef names a pod's owner.
type WorkloadRef struct {
	// Class is the safety rule: Stateless, Stateful, DaemonSet, Mirror,
	// Job, NoController, Unsupported, OwnerNotFound.
	Class string `json:"class"`
	Kind  string `json:"kind,omitempty"`
	Name  string `json:"name,omitempty"`
	Why   string `json:"why,omitempty"`
}

// Workload is a Deployment, StatefulSet or DaemonSet whose status is not
// Available.
type Workload struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Desired and Available are the status's counts (DaemonSet:
	// desiredNumberScheduled and numberAvailable).
	Desired   int32  `json:"desired"`
	Available int32  `json:"available"`
	Impact    Impact `json:"impact"`
	// Reason is the first blocking reason, e.g. "0/1 available: its only
	// pod is on NotReady node node-3 (zone a/b PartialDisruption)".
	Reason string `json:"reason"`
	// Rebound says what rebound does about it, when it has a part.
	Rebound string `json:"rebound,omitempty"`
	// PodsOnNotReadyNodes names its pods bound to NotReady nodes.
	PodsOnNotReadyNodes []string `json:"podsOnNotReadyNodes,omitempty"`
}

// BGP is what the agents report and how the peer set stands.
type BGP struct {
	// Status: "Reported" (some agent reports), "NoReports" (no node
	// carries an agent report), "NotManaged" (no node carries the peer-set
	// label either: rebound's peering is not in use).
	Status string `json:"status"`
	// Message says the same in words.
	Message string `json:"message"`
	// Nodes are the nodes with an agent report, sorted by name.
	Nodes []BGPNode `json:"nodes"`
	// KeptNotReady are NotReady nodes still in the peer set, with why:
	// every other node's BIRD keeps waiting for them.
	KeptNotReady []BGPMember `json:"keptNotReady"`
	// Frozen is true while the published set is frozen (nobody leaves):
	// full disruption, or too many members leaving at once; FrozenReason
	// says which.
	Frozen       bool   `json:"frozen,omitempty"`
	FrozenReason string `json:"frozenReason,omitempty"`
	// LeftOut are the nodes labelled out of the peer set, with why.
	LeftOut []BGPMember `json:"leftOut"`
	// Budgets are every node's blackhole budget (see BGPBudget), sorted
	// by node name; empty when rebound's peering is not in use.
	Budgets []BGPBudget `json:"budgets"`
	// Calico is where the controller's Calico backend writes its BGPPeer,
	// as the published peer set says; nil without the Calico backend.
	Calico *BGPCalico `json:"calico,omitempty"`
}

// BGPCalico is the API group of the Calico BGPPeer, and why.
type BGPCalico struct {
	// APIGroup is crd.projectcalico.org/v1 or projectcalico.org/v3, ""
	// when the controller could choose none (Reason says why).
	APIGroup string `json:"apiGroup"`
	// Reason is the controller's: the --calico-api-group setting and the
	// groups the API server serves.
	Reason string `json:"reason"`
}

// BGPNode is one agent's report.
type BGPNode struct {
	Node  string `json:"node"`
	Ready bool   `json:"ready"`
	// ReportTime is when the agent read BIRD; Stale is true when that is
	// older than the session-report max age (a dead node's last report).
	// Only reports with a BGP part are listed: a gossip-only agent's
	// report (`rebound agent --gossip-only`) has none.
	ReportTime time.Time `json:"reportTime"`
	Stale      bool      `json:"stale"`
	// Error is why the agent could not read BIRD.
	Error string `json:"error,omitempty"`
	// Established counts the peers with an Established session; Waiting
	// lists the others: BIRD in graceful-restart recovery waits for each.
	Established int       `json:"established"`
	Waiting     []BGPWait `json:"waiting"`
}

// BGPWait is one peer a node's BIRD has no Established session with.
type BGPWait struct {
	Peer string `json:"peer"`
	// State is the session state as the agent reports it (Active,
	// Connect, Idle, NotConfigured, Down, ...).
	State     string `json:"state"`
	PeerReady bool   `json:"peerReady"`
	// PeerInSet is the peer's peering.rebound.dev/in-set label.
	PeerInSet string `json:"peerInSet"`
	// Since is an estimate (the report has no per-session time): the
	// later of when this node became Ready and when the peer last changed
	// readiness; omitted when neither is known.
	Since time.Time `json:"since,omitzero"`
	// Reason explains why the peer is still in the set.
	Reason string `json:"reason,omitempty"`
}

// EarlyDetection is whether the nodes the API has Ready can be found dead
// early, on both planes (docs/detection.md), by pkg/liveness's coverage:
// the same rules the verdicts follow.
type EarlyDetection struct {
	// Status: "NotInUse" (no agent gossips: nodes are found dead when the
	// API has them NotReady, by design), "On" (every Ready node covered),
	// "Partial" (Nodes lists those that are not), "Off" (none is:
	// Message says why).
	Status  string `json:"status"`
	Message string `json:"message"`
	// Nodes lists each Ready node whose early detection is off or rests
	// on the Lease alone, sorted by node.
	Nodes []EarlyDetectionNode `json:"nodes"`
	// Disagreements lists each node on which the gossip plane disagrees
	// with the Lease plane now (liveness's rule), sorted by node.
	Disagreements []GossipDisagreement `json:"disagreements"`
	// Hold, when set, is the cluster-wide stop of early judgement this
	// snapshot alone implies (too many nodes distrusted at once). The
	// controller also holds for one --gossip-distrust-window after its
	// start and keeps its own history: rebound_early_judgement_held says
	// what it holds.
	Hold *liveness.Hold `json:"hold,omitempty"`
}

// GossipDisagreement is one node on which the planes disagree.
type GossipDisagreement struct {
	Node string `json:"node"`
	// Reason is WatchersSayDead or MemberDown; Detail says what each
	// plane says.
	Reason string `json:"reason"`
	Detail string `json:"detail"`
	// Held is how its early judgement is held: "Node" (its gossip plane
	// is distrusted until HeldUntil), "ClusterWide" (Hold), or "" (not
	// held: MemberDown is no vote and needs no hold).
	Held      string    `json:"held,omitempty"`
	HeldUntil time.Time `json:"heldUntil,omitzero"`
}

// EarlyDetectionNode is one Ready node not covered by early detection.
type EarlyDetectionNode struct {
	Node string `json:"node"`
	// Mode is "Off" (it cannot be found dead early) or "LeaseOnly" (a
	// quorum of its gossip watchers already has it dead while its Lease
	// renews: a stale Lease alone would do).
	Mode string `json:"mode"`
	// Watchers on the ring of fresh gossip reads, Voters of them that
	// list it and may vote, Quorum the Dead votes a death needs.
	Watchers int `json:"watchers"`
	Voters   int `json:"voters"`
	Quorum   int `json:"quorum"`
	// OwnGossip is its own agent's gossip read: fresh, stale or missing;
	// OwnGossipAt when it was written (omitted when missing).
	OwnGossip   string    `json:"ownGossip"`
	OwnGossipAt time.Time `json:"ownGossipAt,omitzero"`
	Reason      string    `json:"reason"`
}

// BGPMember is a node's place in the peer set, with the peering planner's
// reason (pkg/peering Reason codes).
type BGPMember struct {
	Node          string     `json:"node"`
	Ready         bool       `json:"ready"`
	NotReadySince *time.Time `json:"notReadySince,omitempty"`
	Reason        string     `json:"reason"`
	Message       string     `json:"message"`
}

// Policy is one RecoveryPolicy as the plan used it.
type Policy struct {
	Name string `json:"name"`
	// Source is "cluster", or "built-in" when the RecoveryPolicy CRD is
	// not installed and diagnose assumed the default policy.
	Source            string `json:"source"`
	Valid             bool   `json:"valid"`
	Error             string `json:"error,omitempty"`
	Suspended         bool   `json:"suspended"`
	DryRun            bool   `json:"dryRun"`
	Critical          int    `json:"critical"`
	Stranded          int    `json:"stranded"`
	WaitingForFencing int    `json:"waitingForFencing"`
	Actions           int    `json:"actions"`
	RateLimited       int    `json:"rateLimited"`
	// NoTarget and Held count stranded pods rebound does not act on: no
	// Ready node admits the replacement, or a safety hold (every node
	// NotReady, or a fenced node that appears alive).
	NoTarget int `json:"noTarget"`
	Held     int `json:"held"`
}
