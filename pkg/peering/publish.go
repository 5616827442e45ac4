package peering

// What the controller writes on Node objects, and the node annotations it
// reads. The set itself travels as one document (peerset.go); the agents'
// reports as PeeringReport objects (report.go). The only agent that writes
// a Node is the Calico backend's rejoin agent, and only its own Node's
// LabelInSet from "false" to "true" while it is Ready (internal/agent
// rejoin.go; an admission policy allows nothing else).
const (
	// LabelInSet mirrors the peer set on the nodes: the controller sets it
	// to "true" on every node in the set and to "false" on every other
	// node it manages; a node without it counts as in the set (Calico's
	// BGPPeer selects every node not labelled "false", so that the mesh
	// fails open). Calico's BGPPeer selects its peers with it, and
	// `kubectl get nodes -L peering.rebound.dev/in-set` shows the set.
	// Agents do not read it: they watch the published document.
	LabelInSet = "peering.rebound.dev/in-set"
	// AnnotationBGPPort, when set on a node, is the port its BIRD listens
	// on for BGP. The controller resolves it once (pkg/peering/kube) and
	// publishes it with the set.
	AnnotationBGPPort = "peering.rebound.dev/bgp-port"
	// AnnotationCalicoIPv4 is where Calico records a node's BGP address
	// ("10.0.0.5/24"); rebound reads it first, then the InternalIP.
	AnnotationCalicoIPv4 = "projectcalico.org/IPv4Address"
)
