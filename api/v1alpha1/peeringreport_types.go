package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PeeringReport is one rebound agent's report of its node's BGP sessions,
// read only by the controller's peering reconciler. It is cluster-scoped
// and named after the node; a ValidatingAdmissionPolicy (deploy/agent)
// lets an agent's credential write only the report named after the node
// its token is bound to, so a node can speak only for itself.
//
// It is compact on purpose: sessions with peers the published
// set marks Ready and that are Established are only counted; every other
// session (any session with a peer the set marks NotReady, and any session
// that is not Established) is listed with the time BIRD shows for its last
// state change. The controller needs exactly those to decide whether a
// NotReady node is still alive.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=prep
// +kubebuilder:printcolumn:name="Observed",type=date,JSONPath=`.report.observedAt`
// +kubebuilder:printcolumn:name="Established",type=integer,JSONPath=`.report.established`
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.report.birdError`
type PeeringReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Report is what the agent read from BIRD; absent when the agent runs
	// no BIRD (rebound agent --gossip-only).
	// +optional
	Report PeeringReportData `json:"report,omitzero"`

	// Gossip is what the agent's own probes saw of the members it watches
	// on the agents' gossip ring; absent when the agent does not gossip.
	// It is written by its own field manager, so that the BGP read and
	// the gossip read of one agent never overwrite each other.
	// +optional
	Gossip *GossipReport `json:"gossip,omitempty"`

	// Fencing is what the agent says of its node's watchdog, and its
	// answers to the controller's fencing rounds about other nodes;
	// absent when the agent runs without a watchdog. It is written by its
	// own field manager. docs/fencing.md has the rules that read it.
	// +optional
	Fencing *FencingReport `json:"fencing,omitempty"`
}

// GossipReport is one agent's first-hand read of the members it watches.
// Each agent watches the few members it follows on a hash ring of the
// members (pkg/liveness Watchers), so a death is written by that many
// agents whatever the cluster's size, and nothing is written while
// nothing changes.
type GossipReport struct {
	// ObservedAt is when the agent last wrote this read (the agent's
	// clock); it rewrites it on any change and refreshes it at its report
	// interval, so that the controller can tell a live watcher from one
	// that stopped.
	// +kubebuilder:validation:Required
	ObservedAt metav1.Time `json:"observedAt"`
	// Members counts the members the agent's membership holds alive,
	// itself included.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Members int32 `json:"members,omitempty"`
	// Watchers is how many members watch each member on the agent's ring
	// (its --gossip-watchers). The controller judges with its own
	// --gossip-watchers and reports agents whose number differs: the two
	// must be the same for every vote to be heard. Unset by agents older
	// than the field.
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=7
	Watchers int32 `json:"watchers,omitempty"`
	// Watches lists the members this agent watches, and the nodes it
	// witnesses (their Lease stale while its own renews), with what its
	// own direct probes say of each. Sorted by node. Its k ring watches,
	// and while the Lease plane has lost nodes, the ones it witnesses: up
	// to every other node when it is the only one that reaches the API,
	// hence the bound of the sessions' list (Kubernetes' 5,000 nodes).
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=5000
	Watches []GossipWatch `json:"watches,omitempty"`
}

// GossipWatch is what one agent's own probes say of one member.
type GossipWatch struct {
	// Node is the member's node name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// State is Alive (its last direct probe, at the address the API
	// holds for it, was answered), Dead (the membership declared it dead
	// and neither the member nor its host answered this agent's own
	// probes) or MemberDown (the member does not answer, its host does:
	// no vote).
	// +kubebuilder:validation:Enum=Alive;Dead;MemberDown
	State string `json:"state"`
	// Since is when this agent's probes first saw the member in State
	// (the agent's clock).
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// PeeringReportData is one read of BIRD's sessions.
type PeeringReportData struct {
	// ObservedAt is when the agent read BIRD (the agent's clock). The
	// controller ignores a report older than its report max age, or more
	// than its clock-skew bound in the future.
	// +kubebuilder:validation:Required
	ObservedAt metav1.Time `json:"observedAt"`
	// SetGeneration is the generation of the published peer set the agent
	// had applied when it read BIRD; 0 when it had none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SetGeneration int64 `json:"setGeneration,omitempty"`
	// BirdError is why BIRD could not be read; empty when it was. A report
	// with an error says nothing about sessions.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	BirdError string `json:"birdError,omitempty"`
	// BirdRecovering is true while BIRD is in graceful-restart recovery
	// (it is starting): its sessions say nothing about other nodes yet.
	// +optional
	BirdRecovering bool `json:"birdRecovering,omitempty"`
	// ListenPort is the BGP port this node's BIRD listens on (rebound agent
	// --listen-port); 0 means BGP's 179. The controller publishes it as
	// the node's port unless the node carries peering.rebound.dev/bgp-port.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	ListenPort int32 `json:"listenPort,omitempty"`
	// Established counts the sessions that are Established with peers the
	// published set marks Ready; they are not listed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Established int32 `json:"established,omitempty"`
	// Peers lists every other session: those with peers the published set
	// marks NotReady, and those that are not Established. Sorted by node.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=5000
	Peers []PeerSession `json:"peers,omitempty"`
}

// PeerSession is this node's BGP session with one peer.
type PeerSession struct {
	// Node is the peer's node name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// State is the BGP state as BIRD shows it (Established, Active,
	// Connect, Idle, OpenSent, OpenConfirm, Passive), or NotConfigured /
	// Down when BIRD has no running protocol for the peer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	State string `json:"state"`
	// Since is the session's last state change as BIRD shows it in the
	// since column of `show protocols`, resolved to an absolute time; a
	// lower bound when BIRD printed only a date. Unset when unknown.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// BFD is the BFD session state with the peer (Up, Down, Init,
	// AdminDown), empty when BFD is not in use.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	BFD string `json:"bfd,omitempty"`
}

// FencingReport is an agent's fencing state.
type FencingReport struct {
	// ObservedAt is when the agent last wrote this report (the agent's
	// clock; for people, never compared by the rules).
	// +kubebuilder:validation:Required
	ObservedAt metav1.Time `json:"observedAt"`

	// Armed: the node's watchdog is armed, and the agent feeds it only
	// while it is sanctioned. The controller fences only a node whose
	// report of its current boot says so.
	Armed bool `json:"armed"`

	// Reason says why the agent is not armed, for people.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Reason string `json:"reason,omitempty"`

	// WatchdogSeconds is W, the watchdog's timeout as the device read it
	// back.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	// +optional
	WatchdogSeconds int32 `json:"watchdogSeconds,omitempty"`

	// SanctionSeconds is T, the agent's sanction window.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	// +optional
	SanctionSeconds int32 `json:"sanctionSeconds,omitempty"`

	// BootID is the node's boot ID as the agent read it.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	BootID string `json:"bootID,omitempty"`

	// Lists are every numbered member list the agent may be counting
	// against: while it switches, the old and the new.
	// +kubebuilder:validation:MaxItems=2
	// +listType=atomic
	// +optional
	Lists []MemberList `json:"lists,omitempty"`

	// Testimonies answer the controller's open fencing rounds about other
	// nodes.
	// +kubebuilder:validation:MaxItems=5000
	// +listType=map
	// +listMapKey=node
	// +optional
	Testimonies []FencingTestimony `json:"testimonies,omitempty"`
}

// MemberList is a numbered list of the nodes whose agents count toward
// each other's sanction and fencing.
type MemberList struct {
	// Number orders the lists; a new list has a higher number.
	// +kubebuilder:validation:Minimum=1
	Number int64 `json:"number"`
	// Members are node names.
	// +kubebuilder:validation:MaxItems=5000
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	Members []string `json:"members"`
}

// FencingTestimony is an agent's answer to a fencing round about a node.
type FencingTestimony struct {
	// Node is the node the round is about.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Round is the round's ID, as the controller published it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=300
	Round string `json:"round"`
	// SilentForMilliseconds is how long the agent had heard nothing from
	// the node, in either direction, when it answered: on its own boot
	// clock, and never more than its own process's uptime.
	// +kubebuilder:validation:Minimum=0
	SilentForMilliseconds int64 `json:"silentForMilliseconds"`
}

// PeeringReportList is a list of PeeringReports.
//
// +kubebuilder:object:root=true
type PeeringReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PeeringReport `json:"items"`
}
