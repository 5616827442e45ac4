package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"rebound/pkg/peering"
)

func TestRejoinNeeded(t *testing.T) {
	out := func(mut func(*corev1.Node)) *corev1.Node {
		n := node("node-a", "10.0.0.1", false)
		n.Labels[peering.LabelInSet] = "false"
		if mut != nil {
			mut(n)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"Ready, address, labelled false: back in", out(nil), true},
		{"labelled true", node("node-a", "10.0.0.1", true), false},
		{"no label: the selector has it in already", node("node-a", "10.0.0.1", false), false},
		{"NotReady: the controller's decision stands", out(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }), false},
		{"Ready unknown", out(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }), false},
		{"no Ready condition", out(func(n *corev1.Node) { n.Status.Conditions = nil }), false},
		{"no BGP address: the planner keeps it out", out(func(n *corev1.Node) { n.Annotations = nil }), false},
		{"address from the InternalIP", out(func(n *corev1.Node) {
			n.Annotations = nil
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.9"}}
		}), true},
	} {
		if got, why := RejoinNeeded(tc.node); got != tc.want {
			t.Errorf("%s: RejoinNeeded = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// rejoinHarness runs a rejoiner of node-a against a fake clientset.
type rejoinHarness struct {
	t     *testing.T
	cs    *fake.Clientset
	r     *Rejoiner
	clock *clocktesting.FakeClock
	done  chan error
	stop  context.CancelFunc
	rv    int
}

func startRejoiner(t *testing.T, cs *fake.Clientset) *rejoinHarness {
	t.Helper()
	clk := clocktesting.NewFakeClock(agentT0)
	a, err := New(Options{NodeName: "node-a", Client: cs, RejoinOnly: true, Clock: clk,
		RetryInterval: time.Second, MaxRetryInterval: 4 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &rejoinHarness{t: t, cs: cs, r: a.Rejoiner(), clock: clk, done: make(chan error, 1), stop: cancel}
	go func() { h.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Error(err)
		}
	})
	return h
}

func (h *rejoinHarness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not true within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var nodesGVR = corev1.SchemeGroupVersion.WithResource("nodes")

// getNode reads through the tracker, so that the test's own reads are not
// among the calls the rejoiner made.
func (h *rejoinHarness) getNode(name string) *corev1.Node {
	h.t.Helper()
	o, err := h.cs.Tracker().Get(nodesGVR, "", name)
	if err != nil {
		h.t.Fatal(err)
	}
	return o.(*corev1.Node).DeepCopy()
}

func (h *rejoinHarness) label(name string) string { return h.getNode(name).Labels[peering.LabelInSet] }

// setReady writes the Ready condition as a kubelet would (a watch event
// for the rejoiner, no recorded call), with a new resourceVersion, as the
// API server gives every write (the fake tracker does not).
func (h *rejoinHarness) setReady(name string, ready bool) {
	h.t.Helper()
	n := h.getNode(name)
	h.rv++
	n.ResourceVersion = strconv.Itoa(100 + h.rv)
	n.Status.Conditions[0].Status = corev1.ConditionFalse
	if ready {
		n.Status.Conditions[0].Status = corev1.ConditionTrue
	}
	if err := h.cs.Tracker().Update(nodesGVR, n, ""); err != nil {
		h.t.Fatal(err)
	}
}

func patches(cs *fake.Clientset) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p)
		}
	}
	return out
}

// TestRejoinerPutsItsReturningNodeBack: node-a, left out while dead, comes
// back Ready while no controller runs: its rejoiner sets the label to
// "true" with one JSON patch that tests the old value, and never touches
// node-b (also left out, also Ready) nor a NotReady node-a.
func TestRejoinerPutsItsReturningNodeBack(t *testing.T) {
	a, b := node("node-a", "10.0.0.1", false), node("node-b", "10.0.0.2", false)
	for _, n := range []*corev1.Node{a, b} {
		n.Labels[peering.LabelInSet] = "false"
		n.ResourceVersion = "1"
	}
	a.Status.Conditions[0].Status = corev1.ConditionFalse
	cs := fake.NewClientset(a, b)
	// What the stored node looked like at each patch: the rejoiner acts
	// on a Ready node only, whenever its events arrive.
	var patchedWhileNotReady atomic.Int32
	cs.PrependReactor("patch", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		o, err := cs.Tracker().Get(nodesGVR, "", act.(k8stesting.PatchAction).GetName())
		if err == nil && o.(*corev1.Node).Status.Conditions[0].Status != corev1.ConditionTrue {
			patchedWhileNotReady.Add(1)
		}
		return false, nil, nil
	})
	h := startRejoiner(t, cs)
	srv := httptest.NewServer(h.r.Handler())
	defer srv.Close()
	h.waitFor("ready once the watch synced", func() bool {
		res, err := srv.Client().Get(srv.URL + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	// NotReady, whatever the events: nothing may happen (checked at the
	// patch, by the reactor above).
	h.setReady("node-a", false)
	h.setReady("node-a", true)
	h.waitFor("node-a back in the set", func() bool { return h.label("node-a") == "true" })
	ps := patches(cs)
	if len(ps) != 1 || ps[0].GetName() != "node-a" || ps[0].GetPatchType() != types.JSONPatchType {
		t.Fatalf("patches %+v, want one JSON patch of node-a", ps)
	}
	body := string(ps[0].GetPatch())
	if !strings.Contains(body, `"op":"test"`) || !strings.Contains(body, `"value":"false"`) || !strings.Contains(body, "peering.rebound.dev~1in-set") {
		t.Errorf("patch %s: want a test of the old value \"false\" on the escaped label path", body)
	}
	if h.label("node-b") != "false" {
		t.Error("node-a's rejoiner changed node-b")
	}
	if h.r.Rejoins() != 1 {
		t.Errorf("Rejoins() = %d, want 1", h.r.Rejoins())
	}
	if n := patchedWhileNotReady.Load(); n != 0 {
		t.Errorf("%d patches while node-a was NotReady, want none", n)
	}
}

// TestRejoinerRetriesWithBackoff: a failed patch (the API server is
// unreachable) is retried on the retry timer, doubling, until it works.
func TestRejoinerRetriesWithBackoff(t *testing.T) {
	a := node("node-a", "10.0.0.1", false)
	a.Labels[peering.LabelInSet] = "false"
	cs := fake.NewClientset(a)
	var failures atomic.Int32
	failures.Store(2)
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(-1) >= 0 {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	h := startRejoiner(t, cs)
	h.waitFor("the first attempt", func() bool { return len(patches(cs)) == 1 })
	h.waitFor("a retry timer", func() bool { return h.clock.HasWaiters() })
	h.clock.Step(time.Second)
	h.waitFor("the second attempt", func() bool { return len(patches(cs)) == 2 })
	h.waitFor("a retry timer", func() bool { return h.clock.HasWaiters() })
	h.clock.Step(time.Second)
	if len(patches(cs)) != 2 {
		t.Fatal("retried after 1 s the second time: the delay must double")
	}
	h.clock.Step(time.Second)
	h.waitFor("node-a back in the set", func() bool { return h.label("node-a") == "true" })
	if n := len(patches(cs)); n != 3 {
		t.Errorf("%d patches, want 3 (two failures, one success)", n)
	}
}

// TestRejoinRBACMatchesCalls: deploy/agent/rejoin/rbac.yaml grants exactly
// the calls the rejoiner makes (list and watch its Node, patch it).
func TestRejoinRBACMatchesCalls(t *testing.T) {
	a := node("node-a", "10.0.0.1", false)
	a.Labels[peering.LabelInSet] = "false"
	cs := fake.NewClientset(a)
	h := startRejoiner(t, cs)
	h.waitFor("node-a back in the set", func() bool { return h.label("node-a") == "true" })
	// The informer lists, then watches: the watch may start after the
	// patch.
	h.waitFor("the watch on the Node", func() bool {
		return slices.ContainsFunc(cs.Actions(), func(a k8stesting.Action) bool { return a.GetVerb() == "watch" })
	})
	h.stop()

	used := sets.New[string]()
	for _, act := range cs.Actions() {
		used.Insert(act.GetResource().Group + "/" + act.GetResource().Resource + ":" + act.GetVerb())
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "agent", "rejoin", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	granted := sets.New[string]()
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind != "ClusterRole" {
			continue
		}
		for _, r := range role.Rules {
			if len(r.ResourceNames) > 0 {
				t.Errorf("rule %v: resourceNames cannot name the node a token is bound to", r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						granted.Insert(g + "/" + res + ":" + v)
					}
				}
			}
		}
	}
	if !used.Equal(granted) {
		t.Errorf("deploy/agent/rejoin/rbac.yaml does not match the rejoiner's calls:\n  granted, never called: %v\n  called, not granted: %v",
			sets.List(granted.Difference(used)), sets.List(used.Difference(granted)))
	}
}

func TestRejoinOnlyOptions(t *testing.T) {
	if err := (Options{NodeName: "n", RejoinOnly: true}).WithDefaults().ValidateFlags(); err != nil {
		t.Errorf("--rejoin-only needs no BIRD flags: %v", err)
	}
	for opts, field := range map[*Options]string{
		{RejoinOnly: true}: "--node-name",
		{NodeName: "n", RejoinOnly: true, Once: true}:                                                    "--once",
		{NodeName: "n", RejoinOnly: true, RetryInterval: -1}:                                             "--retry-interval",
		{NodeName: "n", RejoinOnly: true, RetryInterval: 2 * time.Second, MaxRetryInterval: time.Second}: "--max-retry-interval",
	} {
		if err := opts.WithDefaults().ValidateFlags(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: error %v does not name %s", *opts, err, field)
		}
	}
}
