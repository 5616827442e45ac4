package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"rebound/internal/agent/gossip"
)

// Defaults of the address book's flags.
const (
	// DefaultGossipService is the gossip members' Service
	// (deploy/gossip/service.yaml), whose EndpointSlices list each
	// member's pod address with its nodeName.
	DefaultGossipService = "rebound-gossip"
	// DefaultGossipNamespace is where it lives when POD_NAMESPACE (the
	// downward API) is not set.
	DefaultGossipNamespace = "rebound-agent"
	// gossipPortName is the Service's UDP port of the members.
	gossipPortName = "gossip-udp"
)

// APIBook is the gossip's address book read from the API (package gossip,
// AddressBook): member addresses from the EndpointSlices of the members'
// Service, each endpoint's nodeName to its first address and the slice's
// gossip-udp port (else --gossip-port); host addresses from the Nodes,
// the first InternalIP (else ExternalIP) and the kubelet's port in
// status.daemonEndpoints. Never from the gossip: an address a member
// relays is only what a key holder said.
//
// It lists and watches every Node (trimmed to those two fields as they
// arrive, so that 1,000 Nodes cost little memory) and the EndpointSlices
// of one Service in one namespace.
type APIBook struct {
	log         *slog.Logger
	defaultPort uint16
	nodes       cache.SharedIndexInformer
	slices      cache.SharedIndexInformer
	factories   []informers.SharedInformerFactory

	mu      sync.RWMutex
	members map[string]netip.AddrPort
	subs    []func(string)
}

// NewAPIBook builds the book; Start runs its informers.
func NewAPIBook(client kubernetes.Interface, namespace, service string, defaultPort int, log *slog.Logger) *APIBook {
	nf := informers.NewSharedInformerFactory(client, 0)
	sf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=" + service
		}))
	b := &APIBook{
		log:         log,
		defaultPort: uint16(defaultPort),
		nodes:       nf.Core().V1().Nodes().Informer(),
		slices:      sf.Discovery().V1().EndpointSlices().Informer(),
		factories:   []informers.SharedInformerFactory{nf, sf},
		members:     map[string]netip.AddrPort{},
	}
	_ = b.nodes.SetTransform(trimNode)
	recompute := func(any) { b.recompute() }
	_, _ = b.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    recompute,
		UpdateFunc: func(_, _ any) { b.recompute() },
		DeleteFunc: recompute,
	})
	return b
}

// trimNode keeps of a Node what the book reads: its name, addresses and
// kubelet port.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses, DaemonEndpoints: n.Status.DaemonEndpoints},
	}, nil
}

// Start runs the informers until ctx ends and waits until both have
// listed: before that the book knows nobody, and the member would refuse
// every other.
func (b *APIBook) Start(ctx context.Context) error {
	for _, f := range b.factories {
		f.Start(ctx.Done())
	}
	for _, f := range b.factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("gossip address book: %v not listed: %w", typ, context.Cause(ctx))
			}
		}
	}
	// The handlers deliver the first list asynchronously: read it now.
	b.recompute()
	return nil
}

// Member is AddressBook's.
func (b *APIBook) Member(node string) (netip.AddrPort, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	a, ok := b.members[node]
	return a, ok
}

// Host is AddressBook's.
func (b *APIBook) Host(node string) (netip.AddrPort, bool) {
	obj, ok, err := b.nodes.GetStore().GetByKey(node)
	if err != nil || !ok {
		return netip.AddrPort{}, false
	}
	return hostOf(obj.(*corev1.Node))
}

// Subscribe is AddressBook's.
func (b *APIBook) Subscribe(f func(string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs = append(b.subs, f)
}

// hostOf is a Node's host address: its first InternalIP, else its first
// ExternalIP, and its kubelet's port; none when the port is 0.
func hostOf(n *corev1.Node) (netip.AddrPort, bool) {
	port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port <= 0 || port > 65535 {
		return netip.AddrPort{}, false
	}
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type != typ {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
			}
		}
	}
	return netip.AddrPort{}, false
}

// recompute rebuilds the member addresses from every slice and tells the
// subscribers of each added or changed one.
func (b *APIBook) recompute() {
	var all []*discoveryv1.EndpointSlice
	for _, obj := range b.slices.GetStore().List() {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			all = append(all, s)
		}
	}
	next := membersOf(all, b.defaultPort)
	b.mu.Lock()
	var changed []string
	for n, a := range next {
		if old, ok := b.members[n]; !ok || old != a {
			changed = append(changed, n)
		}
	}
	b.members = next
	subs := slices.Clone(b.subs)
	b.mu.Unlock()
	slices.Sort(changed)
	for _, n := range changed {
		for _, f := range subs {
			f(n)
		}
	}
}

// membersOf reads the member addresses from the Service's slices: per
// nodeName, the address of its best endpoint (not terminating over
// terminating, ready over not ready, then the lowest address: a rollout
// lists the old pod and the new one on one node for a while) at the
// slice's gossip-udp port, else defaultPort. Endpoints with no nodeName
// or no IP address are skipped.
func membersOf(all []*discoveryv1.EndpointSlice, defaultPort uint16) map[string]netip.AddrPort {
	type cand struct {
		at                 netip.AddrPort
		terminating, ready bool
	}
	better := func(a, b cand) bool {
		if a.terminating != b.terminating {
			return !a.terminating
		}
		if a.ready != b.ready {
			return a.ready
		}
		return a.at.Addr().Less(b.at.Addr()) || (a.at.Addr() == b.at.Addr() && a.at.Port() < b.at.Port())
	}
	best := map[string]cand{}
	for _, s := range all {
		// FQDN slices are read too, but only their IP literals count
		// (ParseAddr below): the apiserver refuses loopback and
		// link-local addresses in IP slices, so a member on such an
		// address (a lab on one machine) can only be listed there.
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
		default:
			continue
		}
		port := defaultPort
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == gossipPortName && p.Port != nil && *p.Port > 0 && *p.Port <= 65535 &&
				(p.Protocol == nil || *p.Protocol == corev1.ProtocolUDP) {
				port = uint16(*p.Port)
			}
		}
		for _, e := range s.Endpoints {
			if e.NodeName == nil || *e.NodeName == "" || len(e.Addresses) == 0 {
				continue
			}
			ip, err := netip.ParseAddr(e.Addresses[0])
			if err != nil {
				continue
			}
			c := cand{
				at:          netip.AddrPortFrom(ip.Unmap(), port),
				terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
				ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
			}
			if old, ok := best[*e.NodeName]; !ok || better(c, old) {
				best[*e.NodeName] = c
			}
		}
	}
	out := make(map[string]netip.AddrPort, len(best))
	for n, c := range best {
		out[n] = c.at
	}
	return out
}

// Nodes lists the nodes with a member address, for the tests.
func (b *APIBook) Nodes() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return slices.Sorted(maps.Keys(b.members))
}

var _ gossip.AddressBook = (*APIBook)(nil)
