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
// It is compact on purpose (issue 10): sessions with peers the published
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

	// Report is what the agent read from BIRD.
	Report PeeringReportData `json:"report"`
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

// PeeringReportList is a list of PeeringReports.
//
// +kubebuilder:object:root=true
type PeeringReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PeeringReport `json:"items"`
}
