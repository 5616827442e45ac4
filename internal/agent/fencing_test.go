package agent

import (
	"context"
	"encoding/base64"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"rebound/api/v1alpha1"
	"rebound/internal/agent/feeder"
	"rebound/internal/agent/watchdog"
	"rebound/internal/lab/watchdogstandin"
	"rebound/pkg/fencing"
)

// memReports keeps the fencing field as the apiserver would.
type memReports struct {
	mu  sync.Mutex
	rep *v1alpha1.FencingReport
}

func (m *memReports) WriteFencing(_ context.Context, r v1alpha1.FencingReport) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rep = r.DeepCopy()
	return nil
}

func (m *memReports) ReadFencing(context.Context) (*v1alpha1.FencingReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rep.DeepCopy(), nil
}

func (m *memReports) armed() (armed, seen bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rep != nil && m.rep.Armed, m.rep != nil
}

func fencingAgentOptions(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600); err != nil {
		t.Fatal(err)
	}
	return Options{NodeName: "node-a", GossipOnly: true,
		Gossip: GossipOptions{KeyFile: key, BindAddress: netip.MustParseAddr("127.0.0.1"), Join: []string{"127.0.0.1:7946"}},
		Fencing: FencingOptions{
			Timing: fencing.Timing{Watchdog: time.Second, Sanction: 11 * time.Second}, Poll: 100 * time.Millisecond,
			Port: 0, StatePath: filepath.Join(dir, "fencing-list.json"), BootID: "boot-1",
		}}
}

// TestFencingOptionsNameTheirFlags: each bad fencing option is refused by
// its flag, and nothing fences without the gossip.
func TestFencingOptionsNameTheirFlags(t *testing.T) {
	open := func(time.Duration) (watchdog.Device, error) { return nil, watchdog.ErrNotFencing }
	for _, tc := range []struct {
		name string
		edit func(o *Options)
		want string // "" = valid
	}{
		{"the defaults", func(o *Options) { o.Fencing = FencingOptions{Device: "/dev/watchdog0"} }, ""},
		{"no gossip", func(o *Options) { o.Gossip.KeyFile = ""; o.Fencing.Open = open }, "--gossip-key-file"},
		{"a relative device", func(o *Options) { o.Fencing = FencingOptions{Device: "watchdog0"} }, "--watchdog-device"},
		{"a window shorter than two polls past a renewal", func(o *Options) {
			o.Fencing = FencingOptions{Device: "/dev/watchdog0", Timing: fencing.Timing{Watchdog: 10 * time.Second, Sanction: 5 * time.Second}}
		}, "--sanction-window"},
		{"the gossip's port", func(o *Options) { o.Fencing = FencingOptions{Device: "/dev/watchdog0", Port: 7946} }, "--fencing-port"},
		{"a relative state file", func(o *Options) { o.Fencing = FencingOptions{Device: "/dev/watchdog0", StatePath: "list.json"} }, "--fencing-state"},
		{"with --rejoin-only", func(o *Options) {
			o.RejoinOnly = true
			o.GossipOnly = false
			o.Fencing = FencingOptions{Device: "/dev/watchdog0"}
		}, "--rejoin-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fencingAgentOptions(t)
			tc.edit(&o)
			err := o.WithDefaults().ValidateFlags()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	o := fencingAgentOptions(t)
	o.Fencing.Open, o.Client = open, fake.NewClientset()
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "Lease reader") {
		t.Fatalf("an agent that fences without the API: %v", err)
	}
}

// TestFencingArmsFeedsAndDisarmsOnStop: wired into the agent, two
// agents' fencing loops (on 127.0.0.1 and 127.0.0.2, listed by the
// gossip Service's EndpointSlice and by the published member list) arm
// their watchdogs once each saw its node's Lease renewed by quorum reads
// and the other answered its signed probes, feed them, and on a graceful
// stop while sanctioned write a disarmed report, read it back and
// disarm: no node is reset.
func TestFencingArmsFeedsAndDisarmsOnStop(t *testing.T) {
	nodes := map[string]string{"node-a": "127.0.0.1", "node-b": "127.0.0.2"}
	doc, err := fencing.Document{List: fencing.List{Number: 1, Members: []string{"node-a", "node-b"}}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{
		gossipSlice("members", "rebound-agent", "rebound-gossip", 7946, ep("node-a", nodes["node-a"], true, false), ep("node-b", nodes["node-b"], true, false)),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rebound-system", Name: DefaultFencingDocumentName}, Data: map[string]string{fencing.DocumentKey: string(doc)}},
	}
	renew := metav1.NewMicroTime(time.Now())
	for n := range nodes {
		objs = append(objs, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n), RenewTime: &renew},
		})
	}
	api := fake.NewClientset(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The kubelets renew the Leases while the loops poll them.
	go func() {
		for tick := time.NewTicker(200 * time.Millisecond); ; {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
				for n := range nodes {
					l, err := api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{})
					if err != nil {
						continue
					}
					now := metav1.NewMicroTime(time.Now())
					l.Spec.RenewTime = &now
					_, _ = api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
				}
			}
		}
	}()
	port := freeUDPPort(t)
	type running struct {
		agent   *Agent
		reports *memReports
		device  func() *watchdogstandin.Device
		stop    func()
	}
	run := map[string]*running{}
	for n, ip := range nodes {
		var (
			mu     sync.Mutex
			device *watchdogstandin.Device
		)
		r := &running{reports: &memReports{}, device: func() *watchdogstandin.Device { mu.Lock(); defer mu.Unlock(); return device }}
		o := fencingAgentOptions(t)
		o.NodeName, o.Client, o.Fencing.Port, o.Fencing.BootID = n, api, port, n+"-boot-1"
		o.Gossip.BindAddress = netip.MustParseAddr(ip)
		o.Fencing.Leases = feeder.APILeases{Client: api, Node: n}
		o.Fencing.Reports = r.reports
		o.Fencing.Open = func(timeout time.Duration) (watchdog.Device, error) {
			mu.Lock()
			defer mu.Unlock()
			device = watchdogstandin.Open(clock.RealClock{}, timeout, func() { t.Errorf("%s: the watchdog reset the node", n) })
			return device, nil
		}
		if r.agent, err = New(o); err != nil {
			t.Fatal(err)
		}
		book := NewAPIBook(api, "rebound-agent", "rebound-gossip", 7946, r.agent.log)
		if err := book.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if r.stop, err = r.agent.startFencing(ctx, netip.MustParseAddr(ip), book); err != nil {
			t.Fatal(err)
		}
		run[n] = r
	}
	deadline := time.Now().Add(30 * time.Second)
	for n, r := range run {
		for armed, _ := r.reports.armed(); !armed; armed, _ = r.reports.armed() {
			if time.Now().After(deadline) {
				t.Fatalf("%s never armed while its Lease renewed and its peer answered", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if f := r.agent.Feeder(); f == nil || !f.Armed() {
			t.Fatalf("%s: the report says armed, the loop does not", n)
		}
	}
	for n, r := range run {
		r.stop()
		if armed, seen := r.reports.armed(); armed || !seen {
			t.Fatalf("%s: after a graceful stop the report says armed=%v (seen %v), want disarmed", n, armed, seen)
		}
		if d := r.device(); d == nil || d.Fired() {
			t.Fatalf("%s: the graceful stop reset the node", n)
		}
	}
}

// freeUDPPort returns a loopback UDP port free a moment ago.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
