package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"rebound/api/v1alpha1"
	"rebound/internal/agent/feeder"
	"rebound/internal/agent/gossip"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// TestAgentRBACMatchesCalls runs the agent (start, the watch on the set, a
// sync and a report) against recording fakes and compares the API calls
// it makes with deploy/agent/rbac.yaml: every call is granted, and every
// grant is used: RBAC is exactly what the code calls.
// An apply patch creates a missing object, so it needs create as well.
func TestAgentRBACMatchesCalls(t *testing.T) {
	nodes := []*corev1.Node{node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true)}
	cs := fake.NewClientset(nodes[0], nodes[1], publishedSet(1, nodes))
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })

	clk := clocktesting.NewFakeClock(agentT0)
	path := filepath.Join(t.TempDir(), "mesh.conf")
	fc := &fakeControl{path: path}
	a, err := New(Options{
		NodeName: "node-a", Client: cs, Reports: APIReportWriter{Client: dyn}, Version: bird.Bird16, MeshPath: path, Socket: "/run/bird.ctl", AS: 64512,
		Debounce: time.Second, StatusInterval: 5 * time.Second, Clock: clk, Control: fc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	h := &harness{t: t, agent: a, clock: clk, bird: fc}
	h.stepTimer(time.Second)
	h.waitFor("a report", func() bool { return a.Stats().Reports == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The calls, as "group/resource:verb@namespace" (namespace "" for
	// cluster-wide).
	used := permissionsOf(append(cs.Actions(), dyn.Actions()...))

	granted := rbacGrants(t, filepath.Join("..", "..", "deploy", "agent", "rbac.yaml"), func(r rbacv1.PolicyRule) bool {
		return slicesEqual(r.ResourceNames, []string{peering.DefaultPeerSetName})
	})
	if !used.Equal(granted) {
		t.Errorf("deploy/agent/rbac.yaml does not match the agent's calls:\n  granted, never called: %v\n  called, not granted: %v",
			sets.List(granted.Difference(used)), sets.List(used.Difference(granted)))
	}
}

// rbacGrants reads an RBAC file: the ClusterRole's rules cluster-wide,
// the Role's in its namespace, in the same form as the calls. roleRule
// says whether a Role's rule is narrow enough.
// permissionsOf names the permissions calls need, as
// "group/resource:verb@namespace" (namespace "" for cluster-wide). An
// apply patch creates a missing object, so it needs create as well.
func permissionsOf(calls []k8stesting.Action) sets.Set[string] {
	used := sets.New[string]()
	for _, act := range calls {
		res := act.GetResource()
		key := func(v string) string { return res.Group + "/" + res.Resource + ":" + v + "@" + act.GetNamespace() }
		used.Insert(key(act.GetVerb()))
		if p, ok := act.(k8stesting.PatchAction); ok && p.GetPatchType() == "application/apply-patch+yaml" {
			used.Insert(key("create"))
		}
	}
	return used
}

func rbacGrants(t *testing.T, path string, roleRule func(rbacv1.PolicyRule) bool) sets.Set[string] {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := sets.New[string]()
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		if head.Kind != "ClusterRole" && head.Kind != "Role" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(doc), &role); err != nil && head.Kind == "ClusterRole" {
			t.Fatal(err)
		}
		if head.Kind == "Role" {
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			role.Rules = r.Rules
		}
		for _, r := range role.Rules {
			if head.Kind == "Role" && !roleRule(r) {
				t.Errorf("%s: Role rule %v is too wide", path, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out.Insert(g + "/" + res + ":" + v + "@" + head.Metadata.Namespace)
					}
				}
			}
		}
	}
	return out
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// TestGossipRBACMatchesCalls: deploy/gossip/rbac.yaml grants exactly what
// a gossip member calls: the gossip writer's apply of its report, the
// untainter's watches of its Node and Lease and its removal of a leftover
// taint, the address book's watches of the Nodes and of the members'
// EndpointSlices in its own namespace, and the witnesses' watch of every
// node's Lease.
func TestGossipRBACMatchesCalls(t *testing.T) {
	h := startUntainter(t, taintedNode("node-a", agentT0), nodeLease("node-a", agentT0.Add(-time.Hour)))
	h.renewLease("node-a")
	h.step(10 * time.Second)
	h.waitFor("the taint off", func() bool { return h.u.Removals() == 1 })
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	if err := (gossip.APIWriter{Client: dyn, Node: "node-a"}).WriteGossip(context.Background(), liveness.GossipReport{ObservedAt: agentT0}); err != nil {
		t.Fatal(err)
	}

	bookAPI := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Options{}.WithDefaults()
	if err := NewAPIBook(bookAPI, DefaultGossipNamespace, o.Gossip.Service, o.Gossip.Port, slog.New(slog.NewTextHandler(io.Discard, nil))).Start(ctx); err != nil {
		t.Fatal(err)
	}
	leaseAPI := fake.NewClientset()
	lw, err := NewLeaseWatch(leaseAPI, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.Start(ctx); err != nil {
		t.Fatal(err)
	}

	var calls []k8stesting.Action
	for _, c := range [][]k8stesting.Action{h.cs.Actions(), dyn.Actions(), bookAPI.Actions(), leaseAPI.Actions()} {
		calls = append(calls, c...)
	}
	used := permissionsOf(calls)
	granted := rbacGrants(t, filepath.Join("..", "..", "deploy", "gossip", "rbac.yaml"), func(r rbacv1.PolicyRule) bool {
		// Reading the node Leases, and the members' EndpointSlices, only.
		return (slicesEqual(r.Resources, []string{"leases"}) || slicesEqual(r.Resources, []string{"endpointslices"})) &&
			slicesEqual(r.Verbs, []string{"list", "watch"})
	})
	if !used.Equal(granted) {
		t.Errorf("deploy/gossip/rbac.yaml does not match a gossip member's calls:\n  granted, never called: %v\n  called, not granted: %v",
			sets.List(granted.Difference(used)), sets.List(used.Difference(granted)))
	}
}

// TestFencingRBACMatchesCalls: deploy/fencing/rbac.yaml grants exactly the
// reads the fencing loop adds to a gossip member's calls (its Lease by
// quorum GET, its report read back, the one fencing document), and its
// write, the apply of its report's fencing field, is the gossip members'
// existing grant.
func TestFencingRBACMatchesCalls(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(nodeLease("node-a", agentT0))
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.GetVerb() == "get" {
			u := &unstructured.Unstructured{}
			u.SetResourceVersion("1")
			return true, u, nil
		}
		return true, nil, nil
	})
	if _, err := (feeder.APILeases{Client: cs, Node: "node-a"}).ReadLease(ctx); err != nil {
		t.Fatal(err)
	}
	reports := feeder.APIReports{Client: dyn, Node: "node-a"}
	if err := reports.WriteFencing(ctx, v1alpha1.FencingReport{}); err != nil {
		t.Fatal(err)
	}
	_, _ = reports.ReadFencing(ctx)
	a := &Agent{opts: Options{Client: cs, Fencing: FencingOptions{}.withDefaults()}}
	doc := a.watchFencingDocument(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(cs.Actions(), func(act k8stesting.Action) bool {
		return act.GetVerb() == "watch" && act.GetResource().Resource == "configmaps"
	}) {
		if time.Now().After(deadline) {
			t.Fatal("the fencing document was never watched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := doc(); ok {
		t.Fatal("a document read where none is published")
	}

	used := permissionsOf(append(cs.Actions(), dyn.Actions()...))
	fencingGrants := rbacGrants(t, filepath.Join("..", "..", "deploy", "fencing", "rbac.yaml"), func(r rbacv1.PolicyRule) bool {
		return (slicesEqual(r.Resources, []string{"leases"}) && slicesEqual(r.Verbs, []string{"get"})) ||
			(slicesEqual(r.ResourceNames, []string{DefaultFencingDocumentName}) && slicesEqual(r.Verbs, []string{"list", "watch"}))
	})
	gossipGrants := rbacGrants(t, filepath.Join("..", "..", "deploy", "gossip", "rbac.yaml"), func(rbacv1.PolicyRule) bool { return true })
	if missing := used.Difference(fencingGrants.Union(gossipGrants)); missing.Len() > 0 {
		t.Errorf("the fencing loop calls what no grant allows: %v", sets.List(missing))
	}
	if unused := fencingGrants.Difference(used); unused.Len() > 0 {
		t.Errorf("deploy/fencing/rbac.yaml grants what the fencing loop never calls: %v", sets.List(unused))
	}
}
