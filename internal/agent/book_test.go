package agent

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func withType(s *discoveryv1.EndpointSlice, t discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	s.AddressType = t
	return s
}

func gossipSlice(name, ns, service string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
	}
	if port != 0 {
		s.Ports = []discoveryv1.EndpointPort{
			{Name: ptr.To("gossip-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port + 1)},
			{Name: ptr.To("gossip-udp"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(port)},
		}
	}
	return s
}

func ep(node, addr string, ready, terminating bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Terminating: ptr.To(terminating)}}
	if node != "" {
		e.NodeName = ptr.To(node)
	}
	return e
}

func TestMembersOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   map[string]netip.AddrPort
	}{
		{"the slice's gossip-udp port", []*discoveryv1.EndpointSlice{gossipSlice("s", "ns", "svc", 7000, ep("n1", "10.1.0.1", true, false))},
			map[string]netip.AddrPort{"n1": netip.MustParseAddrPort("10.1.0.1:7000")}},
		{"no port named gossip-udp: --gossip-port", []*discoveryv1.EndpointSlice{gossipSlice("s", "ns", "svc", 0, ep("n1", "10.1.0.1", true, false))},
			map[string]netip.AddrPort{"n1": netip.MustParseAddrPort("10.1.0.1:7946")}},
		{"no nodeName or a bad address: skipped", []*discoveryv1.EndpointSlice{gossipSlice("s", "ns", "svc", 7000, ep("", "10.1.0.1", true, false), ep("n2", "not-an-ip", true, false))},
			map[string]netip.AddrPort{}},
		{"a rollout: the new pod over the terminating one", []*discoveryv1.EndpointSlice{gossipSlice("s", "ns", "svc", 7000, ep("n1", "10.1.0.1", true, true), ep("n1", "10.1.0.9", false, false))},
			map[string]netip.AddrPort{"n1": netip.MustParseAddrPort("10.1.0.9:7000")}},
		{"an FQDN slice: its IP literals count, its names do not", []*discoveryv1.EndpointSlice{
			withType(gossipSlice("f", "ns", "svc", 7000, ep("n1", "127.13.1.1", true, false), ep("n2", "member.example", true, false)), discoveryv1.AddressTypeFQDN)},
			map[string]netip.AddrPort{"n1": netip.MustParseAddrPort("127.13.1.1:7000")}},
		{"another address type: skipped", []*discoveryv1.EndpointSlice{
			withType(gossipSlice("o", "ns", "svc", 7000, ep("n1", "10.1.0.1", true, false)), "Other")},
			map[string]netip.AddrPort{}},
		{"two slices", []*discoveryv1.EndpointSlice{
			gossipSlice("a", "ns", "svc", 7000, ep("n1", "10.1.0.1", true, false)),
			gossipSlice("b", "ns", "svc", 7000, ep("n2", "10.1.0.2", false, false))},
			map[string]netip.AddrPort{"n1": netip.MustParseAddrPort("10.1.0.1:7000"), "n2": netip.MustParseAddrPort("10.1.0.2:7000")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := membersOf(tc.slices, 7946)
			if len(got) != len(tc.want) {
				t.Fatalf("membersOf = %v, want %v", got, tc.want)
			}
			for n, a := range tc.want {
				if got[n] != a {
					t.Errorf("%s at %v, want %v", n, got[n], a)
				}
			}
		})
	}
}

func TestHostOf(t *testing.T) {
	node := func(port int32, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: addrs, DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: port}}}}
	}
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}
	external := corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.5"}
	hostname := corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n5"}
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		want string // "" means none
	}{
		{"InternalIP and the kubelet's port", node(10250, hostname, external, internal), "10.0.0.5:10250"},
		{"no InternalIP: ExternalIP", node(10250, hostname, external), "203.0.113.5:10250"},
		{"kubelet port 0: the host cannot be probed", node(0, internal), ""},
		{"no IP address", node(10250, hostname), ""},
	} {
		got, ok := hostOf(tc.n)
		if (tc.want == "") == ok || (ok && got.String() != tc.want) {
			t.Errorf("%s: hostOf = %v %v, want %q", tc.name, got, ok, tc.want)
		}
	}
}

// TestAPIBook: the book follows the API: a member's address from its
// slice, its host from its Node, a subscriber told of each new or
// changed member address, and nothing from other Services.
func TestAPIBook(t *testing.T) {
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"big": "label"}}, Status: corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		Images:          []corev1.ContainerImage{{Names: []string{"x"}}},
	}}
	cs := fake.NewClientset(n1,
		gossipSlice("mine", "rebound-agent", "rebound-gossip", 7946, ep("n1", "10.244.0.1", true, false)),
		gossipSlice("other-service", "rebound-agent", "something-else", 7946, ep("n9", "10.244.0.9", true, false)),
		gossipSlice("other-namespace", "default", "rebound-gossip", 7946, ep("n8", "10.244.0.8", true, false)))
	b := NewAPIBook(cs, "rebound-agent", "rebound-gossip", 7946, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var (
		mu      sync.Mutex
		learned []string
	)
	b.Subscribe(func(n string) { mu.Lock(); learned = append(learned, n); mu.Unlock() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.Nodes(); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("members %v, want n1 only (other Services and namespaces are not the gossip's)", got)
	}
	if a, _ := b.Member("n1"); a != netip.MustParseAddrPort("10.244.0.1:7946") {
		t.Errorf("n1's member at %v", a)
	}
	if a, ok := b.Host("n1"); !ok || a != netip.MustParseAddrPort("10.0.0.1:10250") {
		t.Errorf("n1's host at %v %v", a, ok)
	}
	if _, ok := b.Host("n2"); ok {
		t.Error("a host for a node the API does not have")
	}
	obj, _, _ := b.nodes.GetStore().GetByKey("n1")
	if n := obj.(*corev1.Node); len(n.Labels) != 0 || len(n.Status.Images) != 0 {
		t.Errorf("the cached Node is not trimmed: %+v", n)
	}

	// The member restarts elsewhere: a new address, and the subscriber
	// hears of it.
	s := gossipSlice("mine", "rebound-agent", "rebound-gossip", 7946, ep("n1", "10.244.0.7", true, false), ep("n2", "10.244.1.2", true, false))
	if _, err := cs.DiscoveryV1().EndpointSlices("rebound-agent").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(learned)
		mu.Unlock()
		a, _ := b.Member("n1")
		if a == netip.MustParseAddrPort("10.244.0.7:7946") && slices.Contains(got, "n1") && slices.Contains(got, "n2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the update: n1 at %v, learned %v; want 10.244.0.7:7946 and both n1 and n2 learned", a, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
