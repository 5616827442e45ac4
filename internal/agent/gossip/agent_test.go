package gossip_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"rebound/api/v1alpha1"
	"rebound/internal/agent"
	"rebound/internal/agent/gossip"
	"rebound/pkg/liveness"
)

// patches records the server-side applies a fake API server receives.
type patches struct {
	mu  sync.Mutex
	all []k8stesting.PatchActionImpl
}

func (p *patches) client() *dynamicfake.FakeDynamicClient {
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("patch", "peeringreports", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.all = append(p.all, a.(k8stesting.PatchActionImpl))
		return true, nil, nil
	})
	return dyn
}

func (p *patches) last() (k8stesting.PatchActionImpl, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.all) == 0 {
		return k8stesting.PatchActionImpl{}, false
	}
	return p.all[len(p.all)-1], true
}

// freePort is a port free on addr for both TCP and UDP, as far as one can
// tell before binding it for good.
func freePort(t *testing.T, addr netip.Addr) int {
	t.Helper()
	for range 20 {
		ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port)))); err == nil {
			_ = u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// apiOf is a fake API server holding what the agents' address books
// read: one Node per member (InternalIP its address, a kubelet port) and
// an EndpointSlice of the gossip Service listing each member's address
// with its nodeName.
func apiOf(t *testing.T, members map[string]netip.AddrPort) *fake.Clientset {
	t.Helper()
	var objs []runtime.Object
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "rebound-gossip-x", Namespace: agent.DefaultGossipNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: agent.DefaultGossipService}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for name, at := range members {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: at.Addr().String()}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		}})
	}
	// One port per slice, as the API has it: the members here each have
	// their own port, so each gets its own slice.
	for name, at := range members {
		s := slice.DeepCopy()
		s.Name = "rebound-gossip-" + name
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{at.Addr().String()}, NodeName: ptr.To(name)}}
		s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("gossip-udp"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(at.Port()))}}
		objs = append(objs, s)
	}
	return fake.NewClientset(objs...)
}

// TestGossipOnlyAgents runs two `rebound agent --gossip-only` on
// loopback, with no BIRD flag: each applies only the gossip field of its
// PeeringReport, under its own field manager, with the other Alive; its
// probes and metrics say so.
func TestGossipOnlyAgents(t *testing.T) {
	t.Parallel()
	key := writeFile(t, []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, 16))))
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	type running struct {
		a       *agent.Agent
		patches *patches
	}
	var (
		agents []running
		seed   string
	)
	at := map[string]netip.AddrPort{}
	for i, name := range []string{"node-a", "node-b"} {
		addr := netip.AddrFrom4([4]byte{127, 0, 0, byte(50 + i)})
		at[name] = netip.AddrPortFrom(addr, uint16(freePort(t, addr)))
	}
	api := apiOf(t, at)
	for i, name := range []string{"node-a", "node-b"} {
		addr, port := at[name].Addr(), int(at[name].Port())
		if i == 0 {
			seed = net.JoinHostPort(addr.String(), strconv.Itoa(port))
		}
		p := &patches{}
		a, err := agent.New(agent.Options{
			NodeName: name, GossipOnly: true, Client: api, Logger: discard,
			RetryInterval: 100 * time.Millisecond, MaxRetryInterval: time.Second,
			Gossip: agent.GossipOptions{KeyFile: key, BindAddress: addr, Port: port, Join: []string{seed},
				Reports: gossip.APIWriter{Client: p.client(), Node: name}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		})
		agents = append(agents, running{a, p})
	}

	a := agents[0]
	var applied v1alpha1.PeeringReport
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p, ok := a.patches.last(); ok {
			if p.GetPatchType() != types.ApplyPatchType || p.GetName() != "node-a" {
				t.Fatalf("patch %s of %s: want a server-side apply of node-a", p.GetPatchType(), p.GetName())
			}
			if o := p.PatchOptions; o.FieldManager != gossip.FieldManager || o.Force == nil || !*o.Force {
				t.Fatalf("patch options %+v: want field manager %s, forced", o, gossip.FieldManager)
			}
			applied = v1alpha1.PeeringReport{}
			if err := json.Unmarshal(p.GetPatch(), &applied); err != nil {
				t.Fatal(err)
			}
			if g := applied.Gossip; g != nil && len(g.Watches) == 1 && g.Watches[0].Node == "node-b" && g.Watches[0].State == liveness.GossipAlive {
				if strings.Contains(string(p.GetPatch()), `"report"`) {
					t.Errorf("the gossip writer applied the BGP report's field too: %s", p.GetPatch())
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-a did not write node-b Alive; last applied %+v", applied.Gossip)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if applied.Gossip.Members != 2 {
		t.Errorf("members %d, want 2", applied.Gossip.Members)
	}

	rec := httptest.NewRecorder()
	a.a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "gossip member of 2") {
		t.Errorf("/readyz = %d %q, want 200 and the member count", rec.Code, rec.Body.String())
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.a.GossipCollector())
	rec = httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`rebound_agent_gossip_members{node="node-a"} 2`,
		`rebound_agent_gossip_watched_members{node="node-a",state="Alive"} 1`,
		`rebound_agent_gossip_report_writes_total{node="node-a",outcome="failed"} 0`,
		`rebound_agent_gossip_refused_members_total{node="node-a",reason="UnknownToTheAPI"} 0`,
		`rebound_agent_gossip_watched_members{node="node-a",state="MemberDown"} 0`,
	} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, rec.Body.String())
		}
	}
	if !strings.Contains(rec.Body.String(), `rebound_agent_gossip_bytes_total{direction="sent",kind="packet",node="node-a"}`) {
		t.Errorf("/metrics lacks the gossip bytes:\n%s", rec.Body.String())
	}
}

// TestGossipBesideBIRD: an agent with BIRD gossips on its BGP address
// (--address here; the Node's otherwise) when --gossip-bind-address is
// not set, beside its BIRD loops, and its peers see it.
func TestGossipBesideBIRD(t *testing.T) {
	t.Parallel()
	key := writeFile(t, []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x3c}, 24))))
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	birdAddr, peerAddr := netip.AddrFrom4([4]byte{127, 0, 0, 52}), netip.AddrFrom4([4]byte{127, 0, 0, 53})
	birdPort, peerPort := freePort(t, birdAddr), freePort(t, peerAddr)
	api := apiOf(t, map[string]netip.AddrPort{
		"node-bird": netip.AddrPortFrom(birdAddr, uint16(birdPort)), "node-peer": netip.AddrPortFrom(peerAddr, uint16(peerPort))})
	start := func(o agent.Options) *agent.Agent {
		t.Helper()
		a, err := agent.New(o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", o.NodeName, err)
			}
		})
		return a
	}
	withBIRD := start(agent.Options{
		NodeName: "node-bird", Client: api, Logger: discard, AS: 64512, Address: birdAddr,
		MeshPath: t.TempDir() + "/mesh.conf", Socket: t.TempDir() + "/no-bird.ctl",
		RetryInterval: 100 * time.Millisecond, MaxRetryInterval: time.Second,
		Gossip: agent.GossipOptions{KeyFile: key, Port: birdPort, Join: []string{net.JoinHostPort(peerAddr.String(), strconv.Itoa(peerPort))}},
	})
	p := &patches{}
	start(agent.Options{
		NodeName: "node-peer", GossipOnly: true, Client: api, Logger: discard,
		RetryInterval: 100 * time.Millisecond, MaxRetryInterval: time.Second,
		Gossip: agent.GossipOptions{KeyFile: key, BindAddress: peerAddr, Port: peerPort, Join: []string{net.JoinHostPort(birdAddr.String(), strconv.Itoa(birdPort))},
			Reports: gossip.APIWriter{Client: p.client(), Node: "node-peer"}},
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if last, ok := p.last(); ok {
			var r v1alpha1.PeeringReport
			if err := json.Unmarshal(last.GetPatch(), &r); err != nil {
				t.Fatal(err)
			}
			if r.Gossip != nil && len(r.Gossip.Watches) == 1 && r.Gossip.Watches[0].Node == "node-bird" && r.Gossip.Watches[0].State == liveness.GossipAlive {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the peer did not write the BIRD agent Alive")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m := withBIRD.Gossip(); m == nil || m.Addr() != netip.AddrPortFrom(birdAddr, uint16(birdPort)) {
		t.Fatalf("the BIRD agent's gossip member is not on its BGP address %s:%d", birdAddr, birdPort)
	}
}
