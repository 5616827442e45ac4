// Package deploy embeds the manifests of this folder, so that rebound can
// install its CRD and default policy (the demo does) without a checkout.
package deploy

import _ "embed"

// RecoveryPolicyCRD is the RecoveryPolicy CustomResourceDefinition.
//
//go:embed crd/rebound.dev_recoverypolicies.yaml
var RecoveryPolicyCRD []byte

// PeeringReportCRD is the PeeringReport CustomResourceDefinition: the
// agents' BGP session reports.
//
//go:embed crd/rebound.dev_peeringreports.yaml
var PeeringReportCRD []byte

// DefaultRecoveryPolicy is the default RecoveryPolicy (kube-system critical
// pods, 30 s).
//
//go:embed policy/default-recoverypolicy.yaml
var DefaultRecoveryPolicy []byte

// The agent's namespace, RBAC and ValidatingAdmissionPolicy (deploy/agent),
// and the controller's namespace (deploy/controller), for tests and the
// demo that install the agent's confinement on a sandbox.
var (
	//go:embed agent/namespace/namespace.yaml
	AgentNamespace []byte
	//go:embed agent/rbac.yaml
	AgentRBAC []byte
	//go:embed agent/admission.yaml
	AgentAdmission []byte
	//go:embed agent/daemonset.yaml
	AgentDaemonSet []byte
	//go:embed controller/namespace.yaml
	ControllerNamespace []byte
)

// The Calico backend's rejoin agent (deploy/agent/rejoin): its
// ServiceAccount and RBAC, the ValidatingAdmissionPolicy that confines it
// to putting its own Ready node back into the peer set, and its DaemonSet.
var (
	//go:embed agent/rejoin/rbac.yaml
	RejoinRBAC []byte
	//go:embed agent/rejoin/admission.yaml
	RejoinAdmission []byte
	//go:embed agent/rejoin/daemonset.yaml
	RejoinDaemonSet []byte
)

// The gossip plane's members (deploy/gossip): their ServiceAccount and
// RBAC, and the ValidatingAdmissionPolicies that confine each to its own
// node's report and to taking rebound's taint off its own node.
var (
	//go:embed gossip/rbac.yaml
	GossipRBAC []byte
	//go:embed gossip/admission.yaml
	GossipAdmission []byte
	// FencingRBAC is what watchdog self-fencing adds to a gossip
	// member's credential (deploy/fencing), all reads.
	//go:embed fencing/rbac.yaml
	FencingRBAC []byte
)
