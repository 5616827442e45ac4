// Package kube converts between Kubernetes objects and the peering
// planner's types: Nodes (BGP address and port, readiness, membership),
// PeeringReports (the agents' session reports) and the ConfigMap that
// carries the published set. The controller, the agent and diagnose share
// it so that they can never read an object differently.
package kube

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
)

// BGPAddress returns the node's BGP address: Calico's
// projectcalico.org/IPv4Address annotation (prefix length dropped) when it
// is a valid IPv4 address, else the first IPv4 InternalIP. The zero Addr
// means none.
func BGPAddress(n *corev1.Node) netip.Addr {
	if v := n.Annotations[peering.AnnotationCalicoIPv4]; v != "" {
		host, _, _ := strings.Cut(v, "/")
		if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
			return a
		}
	}
	for _, addr := range n.Status.Addresses {
		if addr.Type != corev1.NodeInternalIP {
			continue
		}
		if a, err := netip.ParseAddr(addr.Address); err == nil && a.Unmap().Is4() {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// BGPPort returns the port in the node's peering.rebound.dev/bgp-port
// annotation, or 0 (BGP's 179) when it is missing or not a port number.
func BGPPort(n *corev1.Node) uint16 {
	p, err := strconv.ParseUint(n.Annotations[peering.AnnotationBGPPort], 10, 16)
	if err != nil {
		return 0
	}
	return uint16(p)
}

// Ready returns whether the node's Ready condition is True and when that
// condition last changed (zero when the node has no Ready condition).
func Ready(n *corev1.Node) (bool, time.Time) { return kubestatus.NodeReadySince(n) }

// InSet reports whether the node carries peering.rebound.dev/in-set=true.
func InSet(n *corev1.Node) bool { return n.Labels[peering.LabelInSet] == "true" }

// PlannerNode turns a Node into the planner's view: the one place where a
// node's BGP address and port are resolved (annotation
// peering.rebound.dev/bgp-port, Calico's IPv4 annotation, InternalIP). The
// controller publishes what it resolves, so agents never read Nodes for it.
func PlannerNode(n *corev1.Node) peering.Node {
	ready, since := Ready(n)
	return peering.Node{
		Name:           n.Name,
		Address:        BGPAddress(n),
		Port:           BGPPort(n),
		Ready:          ready,
		LastTransition: since,
		KeepInMesh:     peering.KeepInMeshFromLabels(n.Labels),
	}
}
