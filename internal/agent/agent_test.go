package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
	"rebound/pkg/peering/kube"
)

func node(name, addr string, inSet bool) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{peering.AnnotationCalicoIPv4: addr + "/24"}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if inSet {
		n.Labels[peering.LabelInSet] = "true"
	}
	return n
}

var agentT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// publishedSet is the document for the nodes labelled in-set, as the
// controller would publish it (every member Ready).
func publishedSet(gen int64, nodes []*corev1.Node) *corev1.ConfigMap {
	doc := peering.PeerSet{Version: peering.PeerSetVersion, Generation: gen, PublishedAt: agentT0, Peers: []peering.PublishedPeer{}}
	for _, n := range nodes {
		if !kube.InSet(n) {
			continue
		}
		doc.Peers = append(doc.Peers, peering.PublishedPeer{Name: n.Name, Address: kube.BGPAddress(n), Ready: true, Reason: peering.InReady})
	}
	slices.SortFunc(doc.Peers, func(a, b peering.PublishedPeer) int { return strings.Compare(a.Name, b.Name) })
	return peerSetConfigMap(doc)
}

func peerSetConfigMap(doc peering.PeerSet) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName},
		Data:       map[string]string{peering.PeerSetKey: doc.Encode()},
	}
}

// fakeReports records the reports written; while failing is set every
// write fails (an apiserver outage) and is only counted.
type fakeReports struct {
	mu       sync.Mutex
	last     []peering.Report
	failing  bool
	attempts int
}

func (f *fakeReports) WriteReport(_ context.Context, r peering.Report) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.failing {
		return errors.New("connection refused")
	}
	f.last = append(f.last, r)
	return nil
}

func (f *fakeReports) setFailing(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = v
}

func (f *fakeReports) attempted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

func (f *fakeReports) latest() peering.Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[len(f.last)-1]
}

// harness runs an agent on a fake API and a fake clock; the test moves
// time, it never sleeps: it polls the agent's counters with a deadline.
type harness struct {
	t       *testing.T
	agent   *Agent
	clock   *clocktesting.FakeClock
	client  *fake.Clientset
	bird    *fakeControl
	reports *fakeReports
	nodes   []*corev1.Node
	gen     int64
}

func startHarness(t *testing.T, nodes ...*corev1.Node) *harness {
	t.Helper()
	objs := []runtime.Object{publishedSet(1, nodes)}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	client := fake.NewClientset(objs...)
	clk := clocktesting.NewFakeClock(agentT0)
	path := filepath.Join(t.TempDir(), "mesh.conf")
	fc := &fakeControl{path: path}
	reps := &fakeReports{}
	a, err := New(Options{
		NodeName: "node-a", Client: client, Reports: reps, Version: bird.Bird16, MeshPath: path, Socket: "/run/bird.ctl", AS: 64512,
		Debounce: time.Second, StatusInterval: 5 * time.Second, ReportInterval: time.Minute, ReadyAfter: 10 * time.Minute,
		Clock: clk, Control: fc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
			t.Errorf("Run: %v", err)
		}
	})
	return &harness{t: t, agent: a, clock: clk, client: client, bird: fc, reports: reps, nodes: nodes, gen: 1}
}

// waitFor polls cond (real time, a deadline against hangs only).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not true within 10 s; stats %+v", what, h.agent.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// step moves the fake clock once the loop waits on its status ticker.
func (h *harness) step(d time.Duration) { h.stepWith(1, d) }

// stepTimer moves the fake clock once the loop also waits on a debounce
// or retry timer (two waiters: the ticker and the timer).
func (h *harness) stepTimer(d time.Duration) { h.stepWith(2, d) }

func (h *harness) stepWith(waiters int, d time.Duration) {
	h.t.Helper()
	h.waitFor("the loop waits on its timers", func() bool { return h.clock.Waiters() >= waiters })
	h.clock.Step(d)
}

// setInSet publishes a new generation with the node in or out.
func (h *harness) setInSet(name string, in bool) {
	h.t.Helper()
	for _, n := range h.nodes {
		if n.Name == name {
			if in {
				n.Labels[peering.LabelInSet] = "true"
			} else {
				delete(n.Labels, peering.LabelInSet)
			}
		}
	}
	h.gen++
	h.publish(publishedSet(h.gen, h.nodes))
}

func (h *harness) publish(cm *corev1.ConfigMap) {
	h.t.Helper()
	if _, err := h.client.CoreV1().ConfigMaps(cm.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// polledNow tells whether the agent's last poll of BIRD ran at the fake
// clock's present.
func (h *harness) polledNow() bool {
	h.agent.mu.Lock()
	defer h.agent.mu.Unlock()
	return h.agent.beat.Equal(h.clock.Now())
}

// appliedGeneration is the generation in the agent's cache.
func (h *harness) cachedGeneration() int64 {
	cm, err := h.agent.lister.Get(peering.DefaultPeerSetName)
	if err != nil {
		return 0
	}
	s, err := kube.PeerSetFromConfigMap(cm)
	if err != nil {
		return -1
	}
	return s.Generation
}

func TestAgentRendersSetDebouncesAndReports(t *testing.T) {
	h := startHarness(t,
		node("node-a", "10.0.0.1", true),
		node("node-b", "10.0.0.2", true),
		node("node-c", "10.0.0.3", true),
	)
	h.bird.protos = []bird.Protocol{
		{Name: "Mesh_10_0_0_2", Proto: "BGP", State: "up", Info: "Established"},
		{Name: "Mesh_10_0_0_3", Proto: "BGP", State: "start", Since: "15:40:19", Info: "Active"},
	}
	// Nothing happens before the debounce ends.
	h.waitFor("loop running", func() bool { return h.agent.Readiness().Reason != "" && h.clock.HasWaiters() })
	if h.bird.configures() != 0 {
		t.Fatal("reloaded before the debounce ended")
	}
	h.stepTimer(time.Second)
	h.waitFor("first reload", func() bool { return h.agent.Stats().Reloads == 1 })
	seen := h.bird.seen[0]
	if !strings.Contains(seen, "Mesh_10_0_0_2") || !strings.Contains(seen, "Mesh_10_0_0_3") || strings.Contains(seen, "Mesh_10_0_0_1 ") {
		t.Fatalf("rendered include is not the set without this node:\n%s", seen)
	}
	// The sessions were reported, compactly, with the clock's time: the
	// Established one with a Ready peer counted, the other listed with
	// the time BIRD shows for it (resolved against BIRD's clock).
	h.waitFor("report", func() bool { return h.agent.Stats().Reports == 1 })
	rep := h.reports.latest()
	if rep.Reporter != "node-a" || rep.Established != 1 || len(rep.Sessions) != 1 || rep.Sessions[0].Peer != "node-c" || rep.Sessions[0].State != "Active" ||
		!rep.ObservedAt.Equal(h.clock.Now()) || rep.SetGeneration != 1 || !rep.Sessions[0].Since.Equal(h.clock.Now().Add(-20*time.Second)) {
		t.Errorf("report = %+v", rep)
	}
	// node-c in the set and not Established: not ready.
	if r := h.agent.Readiness(); r.Ready || !strings.Contains(r.Reason, "node-c") {
		t.Errorf("readiness = %+v, want not ready waiting for node-c", r)
	}

	// node-c leaves the set: one reload, and readiness no longer waits
	// for it although its session is still down.
	h.setInSet("node-c", false)
	h.stepTimer(time.Second)
	h.waitFor("reload without node-c", func() bool { return h.agent.Stats().Reloads == 2 })
	h.step(5 * time.Second) // the status ticker
	h.waitFor("ready", func() bool { return h.agent.Readiness().Ready })
	rec := httptest.NewRecorder()
	h.agent.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz = %d %s, want 200", rec.Code, rec.Body)
	}

	// Two changes inside one debounce window: one reload.
	h.setInSet("node-c", true)
	h.setInSet("node-b", false)
	h.waitFor("both changes seen", func() bool { return h.cachedGeneration() == h.gen })
	h.stepTimer(time.Second)
	h.waitFor("third reload", func() bool { return h.agent.Stats().Reloads == 3 })
	h.step(5 * time.Second)
	if got := h.agent.Stats().Reloads; got != 3 {
		t.Errorf("reloads = %d, want 3 (two changes in one window are one reload)", got)
	}
}

// TestAgentReportWritesBackOff: with the apiserver unreachable, a failed
// report is retried after 1, 2, 4, 8 s ... (up to MaxRetryInterval), not
// at every 5 s poll; once it is back, the next due write goes through.
func TestAgentReportWritesBackOff(t *testing.T) {
	h := startHarness(t, node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true))
	h.bird.protos = []bird.Protocol{{Name: "Mesh_10_0_0_2", Proto: "BGP", State: "up", Info: "Established"}}
	h.reports.setFailing(true)
	h.waitFor("loop running", func() bool { return h.clock.HasWaiters() })
	h.stepTimer(time.Second)
	h.waitFor("first reload", func() bool { return h.agent.Stats().Reloads == 1 })
	h.waitFor("first attempt", func() bool { return h.reports.attempted() == 1 })
	// Polls at +5 ... +40 s: attempts at +5 (after 1 s), +10 (2 s),
	// +15 (4 s), +25 (8 s, due at +23); +20, +30, +35 and +40 wait
	// (16 s, due at +41).
	for range 8 {
		h.step(5 * time.Second)
		h.waitFor("the poll", h.polledNow)
	}
	if got := h.reports.attempted(); got != 5 {
		t.Fatalf("report attempts over 9 polls of a failing apiserver = %d, want 5 (backing off)", got)
	}
	h.reports.setFailing(false)
	h.step(5 * time.Second)
	h.waitFor("the report after the outage", func() bool { return h.agent.Stats().Reports == 1 })
}

func TestAgentBirdUnreachableRetriesWithBackoff(t *testing.T) {
	h := startHarness(t, node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true))
	down := &bird.UnreachableError{Socket: "/run/bird.ctl", Err: io.EOF}
	h.bird.errs = []error{down, down}
	h.stepTimer(time.Second) // debounce
	h.waitFor("failed reload", func() bool { return h.agent.Stats().Unreachable == 1 })
	if s := h.agent.Stats(); !strings.Contains(s.LastError, "/run/bird.ctl") {
		t.Errorf("last error %q does not name the socket", s.LastError)
	}
	h.stepTimer(time.Second) // first retry, 1 s later: fails again
	h.waitFor("second failure", func() bool { return h.agent.Stats().Unreachable == 2 })
	h.stepTimer(time.Second) // the retry now waits 2 s: nothing yet
	if got := h.bird.configures(); got != 2 {
		t.Fatalf("configure attempts = %d after 1 s of a 2 s backoff, want 2", got)
	}
	h.stepTimer(time.Second)
	h.waitFor("retry reloads", func() bool { return h.agent.Stats().Reloads == 1 })
	if s := h.agent.Stats(); s.LastError != "" {
		t.Errorf("last error %q after a success", s.LastError)
	}
}

func TestAgentOnceAppliesTheSetAndReturns(t *testing.T) {
	nodes := []*corev1.Node{node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true), node("node-c", "10.0.0.3", false)}
	client := fake.NewClientset(nodes[0], nodes[1], nodes[2], publishedSet(1, nodes))
	path := filepath.Join(t.TempDir(), "mesh.conf")
	fc := &fakeControl{path: path, errs: []error{&bird.UnreachableError{Socket: "/run/bird.ctl", Err: io.EOF}}}
	opts := Options{
		NodeName: "node-a", Client: client, MeshPath: path, Socket: "/run/bird.ctl", AS: 64512, Once: true,
		Control: fc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// BIRD is down and there is no parse check: --once fails, saying why.
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "/run/bird.ctl") {
		t.Fatalf("Run = %v, want an error naming the socket", err)
	}
	// BIRD answers: the set (node-b only) is applied and Run returns.
	a, _ = New(opts)
	if err := a.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fc.seen[len(fc.seen)-1]; !strings.Contains(got, "Mesh_10_0_0_2") || strings.Contains(got, "Mesh_10_0_0_3") {
		t.Errorf("applied include is not the set:\n%s", got)
	}
}

// TestAgentRefusesEmptyAndBelowFloorSets: a published set that is empty,
// or smaller than the floor published with it, or unreadable, is not
// applied; the last good file stays, the refusal is counted and says why.
func TestAgentRefusesEmptyAndBelowFloorSets(t *testing.T) {
	h := startHarness(t, node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true), node("node-c", "10.0.0.3", true))
	h.stepTimer(time.Second)
	h.waitFor("first reload", func() bool { return h.agent.Stats().Reloads == 1 })
	good, err := os.ReadFile(h.bird.path)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		doc  func(gen int64) *corev1.ConfigMap
		want string
	}{
		{func(gen int64) *corev1.ConfigMap {
			return peerSetConfigMap(peering.PeerSet{Version: 1, Generation: gen, PublishedAt: agentT0, Peers: []peering.PublishedPeer{}})
		}, "empty"},
		{func(gen int64) *corev1.ConfigMap {
			// A floor above the member count fails the strict parse.
			return peerSetConfigMap(peering.PeerSet{Version: 1, Generation: gen, PublishedAt: agentT0, Floor: 3, Peers: []peering.PublishedPeer{
				{Name: "node-a", Address: netip.MustParseAddr("10.0.0.1"), Ready: true, Reason: peering.InReady},
			}})
		}, "floor 3"},
		{func(gen int64) *corev1.ConfigMap {
			cm := peerSetConfigMap(peering.PeerSet{})
			cm.Data[peering.PeerSetKey] = `{"version":1,"generation":` + strconv.FormatInt(gen, 10) + `,"surprise":true}`
			return cm
		}, "surprise"},
		{func(gen int64) *corev1.ConfigMap {
			// Only this node, floor 0: consistent, yet it leaves node-a
			// without a single BGP peer.
			return peerSetConfigMap(peering.PeerSet{Version: 1, Generation: gen, PublishedAt: agentT0, Peers: []peering.PublishedPeer{
				{Name: "node-a", Address: netip.MustParseAddr("10.0.0.1"), Ready: true, Reason: peering.InReady},
			}})
		}, "leaves this node no BGP peer"},
	} {
		h.gen++
		cm := tc.doc(h.gen)
		h.publish(cm)
		h.waitFor("the new document cached", func() bool {
			got, err := h.agent.lister.Get(peering.DefaultPeerSetName)
			return err == nil && got.Data[peering.PeerSetKey] == cm.Data[peering.PeerSetKey]
		})
		h.stepTimer(time.Second)
		h.waitFor("the refusal", func() bool { return h.agent.Stats().Refused == i+1 })
		if s := h.agent.Stats(); !strings.Contains(s.LastRefusal, tc.want) || s.Reloads != 1 {
			t.Errorf("refusal %d: stats %+v, want a refusal naming %q and no reload", i, s, tc.want)
		}
		if now, _ := os.ReadFile(h.bird.path); string(now) != string(good) {
			t.Errorf("refusal %d: the last good file changed:\n%s", i, now)
		}
		wantLines(t, scrape(t, h.agent), fmt.Sprintf(`rebound_agent_peer_set_refused_total{node="node-a"} %d`, i+1))
	}
	// Floor check itself (the parser lets only consistent floors through).
	if r := Refusal(peering.PeerSet{Generation: 4, Floor: 2, Peers: []peering.PublishedPeer{{Name: "x"}}}); !strings.Contains(r, "below its floor 2") {
		t.Errorf("Refusal below floor = %q", r)
	}
	// A good set again is applied.
	h.setInSet("node-c", false)
	h.stepTimer(time.Second)
	h.waitFor("reload after the refusals", func() bool { return h.agent.Stats().Reloads == 2 })
}

// TestAgentOnceDeadlineKeepsTheLastGoodFile: with no published set (an
// API server that does not answer looks the same to --once), --once gives
// up at its deadline, keeps the file that is there and exits 0; without
// any file it fails, saying why.
func TestAgentOnceDeadlineKeepsTheLastGoodFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.conf")
	client := fake.NewClientset(node("node-a", "10.0.0.1", true))
	opts := Options{
		NodeName: "node-a", Client: client, MeshPath: path, Socket: "/run/bird.ctl", AS: 64512, Once: true, OnceTimeout: 200 * time.Millisecond,
		Control: &fakeControl{path: path}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	a, _ := New(opts)
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no earlier") {
		t.Fatalf("no file, no set: Run = %v, want an error saying there is no file to keep", err)
	}
	if err := os.WriteFile(path, []byte("# last good\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a, _ = New(opts)
	if err := a.Run(context.Background()); err != nil {
		t.Fatalf("with a last good file: Run = %v, want nil", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("--once took %v with a 200ms deadline", time.Since(start))
	}
	if got, _ := os.ReadFile(path); string(got) != "# last good\n" {
		t.Errorf("the last good file changed: %q", got)
	}
	// An empty published set: refused, file kept.
	if _, err := client.CoreV1().ConfigMaps(peering.DefaultPeerSetNamespace).Create(context.Background(),
		peerSetConfigMap(peering.PeerSet{Version: 1, Generation: 9, PublishedAt: agentT0, Peers: []peering.PublishedPeer{}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a, _ = New(opts)
	if err := a.Run(context.Background()); err != nil || a.Stats().Refused != 1 {
		t.Fatalf("empty set with --once: Run = %v, stats %+v; want nil and one refusal", err, a.Stats())
	}
}

// TestAgentOnceLeavesOutNotReadyPeersInGrace: BIRD's start renders only
// peers with evidence of life (the start rule), whatever the set says
// about a NotReady peer in its grace period.
func TestAgentOnceLeavesOutNotReadyPeersInGrace(t *testing.T) {
	nodes := []*corev1.Node{node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true), node("node-c", "10.0.0.3", true)}
	doc := peering.PeerSet{Version: 1, Generation: 1, PublishedAt: agentT0, Peers: []peering.PublishedPeer{
		{Name: "node-a", Address: netip.MustParseAddr("10.0.0.1"), Ready: true, Reason: peering.InReady},
		{Name: "node-b", Address: netip.MustParseAddr("10.0.0.2"), Ready: true, Reason: peering.InReady},
		{Name: "node-c", Address: netip.MustParseAddr("10.0.0.3"), Reason: peering.InGracePeriod}, // NotReady, in grace
	}}
	client := fake.NewClientset(nodes[0], nodes[1], nodes[2], peerSetConfigMap(doc))
	path := filepath.Join(t.TempDir(), "mesh.conf")
	fc := &fakeControl{path: path}
	a, err := New(Options{
		NodeName: "node-a", Client: client, MeshPath: path, Socket: "/run/bird.ctl", AS: 64512, Once: true,
		Control: fc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fc.seen[len(fc.seen)-1]; !strings.Contains(got, "Mesh_10_0_0_2") || strings.Contains(got, "Mesh_10_0_0_3") {
		t.Errorf("BIRD's start config must have the Ready node-b and not the NotReady node-c:\n%s", got)
	}
}
