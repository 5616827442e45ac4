package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
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

// harness runs an agent on a fake API and a fake clock; the test moves
// time, it never sleeps: it polls the agent's counters with a deadline.
type harness struct {
	t      *testing.T
	agent  *Agent
	clock  *clocktesting.FakeClock
	client *fake.Clientset
	bird   *fakeControl
}

func startHarness(t *testing.T, nodes ...*corev1.Node) *harness {
	t.Helper()
	var objs []runtimeObject
	for _, n := range nodes {
		objs = append(objs, n)
	}
	client := fake.NewClientset(toObjects(objs)...)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "mesh.conf")
	fc := &fakeControl{path: path}
	a, err := New(Options{
		NodeName: "node-a", Client: client, Version: bird.Bird16, MeshPath: path, Socket: "/run/bird.ctl", AS: 64512,
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
	return &harness{t: t, agent: a, clock: clk, client: client, bird: fc}
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

func (h *harness) setInSet(name string, in bool) {
	h.t.Helper()
	ctx := context.Background()
	n, err := h.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if in {
		n.Labels[peering.LabelInSet] = "true"
	} else {
		delete(n.Labels, peering.LabelInSet)
	}
	if _, err := h.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func TestAgentRendersSetDebouncesAndReports(t *testing.T) {
	h := startHarness(t,
		node("node-a", "10.0.0.1", true),
		node("node-b", "10.0.0.2", true),
		node("node-c", "10.0.0.3", true),
	)
	h.bird.protos = []bird.Protocol{
		{Name: "Mesh_10_0_0_2", Proto: "BGP", State: "up", Info: "Established"},
		{Name: "Mesh_10_0_0_3", Proto: "BGP", State: "start", Info: "Active"},
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
	// The sessions were reported on the node, with the clock's time.
	h.waitFor("report", func() bool { return h.agent.Stats().Reports == 1 })
	n, _ := h.client.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	rep, err := peering.ParseSessionReport(n.Annotations[peering.AnnotationSessions])
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions["node-b"] != "Established" || rep.Sessions["node-c"] != "Active" || !rep.Time.Equal(h.clock.Now()) {
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
	h.waitFor("both changes seen", func() bool {
		l, _ := h.agent.lister.List(everything())
		in := 0
		for _, n := range l {
			if n.Labels[peering.LabelInSet] == "true" {
				in++
			}
		}
		return in == 2 // node-a and node-c
	})
	h.stepTimer(time.Second)
	h.waitFor("third reload", func() bool { return h.agent.Stats().Reloads == 3 })
	h.step(5 * time.Second)
	if got := h.agent.Stats().Reloads; got != 3 {
		t.Errorf("reloads = %d, want 3 (two changes in one window are one reload)", got)
	}
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

type runtimeObject = *corev1.Node

func toObjects(nodes []runtimeObject) []runtime.Object {
	out := make([]runtime.Object, len(nodes))
	for i, n := range nodes {
		out[i] = n
	}
	return out
}

func everything() labels.Selector { return labels.Everything() }

func TestAgentOnceAppliesTheSetAndReturns(t *testing.T) {
	client := fake.NewClientset(node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true), node("node-c", "10.0.0.3", false))
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

// TestAgentOnceLeavesOutNotReadyPeersInGrace: BIRD's start renders only
// peers with evidence of life (the start rule), whatever the set says
// about a NotReady peer in its grace period.
func TestAgentOnceLeavesOutNotReadyPeersInGrace(t *testing.T) {
	dead := node("node-c", "10.0.0.3", true) // in the set: NotReady, in grace
	dead.Status.Conditions[0].Status = corev1.ConditionFalse
	client := fake.NewClientset(node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true), dead)
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
