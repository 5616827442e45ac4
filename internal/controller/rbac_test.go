package controller

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kfake "k8s.io/client-go/kubernetes/fake"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// apiCall is one kind of API request: "group/resource:verb", with the
// object's name for calls whose grant is scoped by resourceNames.
type apiCall struct {
	perm string
	name string
}

// The permission check: deploy/rbac must grant exactly the calls the
// controller's code makes. The calls are not listed by hand: the test runs
// the recovery reconciler (every action kind, a NoTarget Event, the stop
// switch, the status patch) against fake clients that record each request,
// and adds list+watch for every kind the caches hold (watchedObjects, the
// list SetupRecovery itself registers). Only controller-runtime's leader
// election is a table, because the code that calls it is not ours.

// leaderElectionCalls are what controller-runtime's leader election
// (NewManager, LeaderElection) does in the controller's namespace: its
// Lease, and Events through client-go's legacy recorder, which patches an
// Event when it repeats.
var leaderElectionCalls = []string{
	"coordination.k8s.io/leases:get", "coordination.k8s.io/leases:create", "coordination.k8s.io/leases:update",
	"/events:create", "/events:patch",
}

func perm(group, resource, verb string) string { return group + "/" + resource + ":" + verb }

func (r *recorder) add(perm, name string) { r.calls[apiCall{perm, name}] = true }

func (r *recorder) resourceOf(t *testing.T, s *runtime.Scheme, obj runtime.Object) (string, string) {
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		t.Fatal(err)
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.Group, plural.Resource
}

// cachedClient records what a read from the informer caches costs in RBAC:
// list and watch of the kind.
func (r *recorder) cachedClient(t *testing.T, s *runtime.Scheme, base client.WithWatch) client.Client {
	read := func(obj runtime.Object) {
		g, res := r.resourceOf(t, s, obj)
		r.add(perm(g, res, "list"), "")
		r.add(perm(g, res, "watch"), "")
	}
	return interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			read(obj)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			read(list)
			return c.List(ctx, list, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			g, res := r.resourceOf(t, s, obj)
			r.add(perm(g, res+"/"+sub, "patch"), "")
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return errors.New("unexpected write through the cached client")
		},
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return errors.New("unexpected write through the cached client")
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return errors.New("unexpected write through the cached client")
		},
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return errors.New("unexpected write through the cached client")
		},
	})
}

// uncachedReader records direct reads (the stop switch).
func (r *recorder) uncachedReader(t *testing.T, s *runtime.Scheme, base client.WithWatch) client.Reader {
	return interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			g, res := r.resourceOf(t, s, obj)
			r.add(perm(g, res, "get"), key.Name)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			g, res := r.resourceOf(t, s, list)
			r.add(perm(g, res, "list"), "")
			return c.List(ctx, list, opts...)
		},
	})
}

// apiCalls records the executor's requests on the clientset.
func (r *recorder) apiCalls(api *kfake.Clientset) {
	for _, a := range api.Actions() {
		res := a.GetResource()
		name := ""
		if n, ok := a.(interface{ GetName() string }); ok {
			name = n.GetName()
		}
		if o, ok := a.(interface{ GetObject() runtime.Object }); ok && name == "" {
			if m, err := meta.Accessor(o.GetObject()); err == nil {
				name = m.GetName()
			}
		}
		resource := res.Resource
		if a.GetSubresource() != "" {
			resource += "/" + a.GetSubresource()
		}
		r.add(perm(res.Group, resource, a.GetVerb()), name)
	}
}

func TestRBACMatchesCalls(t *testing.T) {
	rec := &recorder{calls: map[apiCall]bool{}}
	world := recoveryWorld()
	r, _, api := newTestReconciler(t, rec, world)
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	if _, err := r.Reconcile(ctx, recoveryKey); err != nil {
		t.Fatal(err)
	}

	rec.apiCalls(api)
	// A rescue a two-plane verdict decided (its executor re-reads the
	// node's Lease), and the unreachable reconciler (a taint, a pod marked
	// not ready, their Events).
	tp, tpAPI := newTwoPlaneReconciler(t, rec, twoPlaneWorld(now.Add(-15*time.Second)),
		&liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: now.Add(-3 * time.Second)})
	if _, err := tp.Reconcile(ctx, recoveryKey); err != nil {
		t.Fatal(err)
	}
	rec.apiCalls(tpAPI)
	u := newUnreachableFixture(t, rec, unreachableWorld(), UnreachableOptions{Plan: unreachable.Options{MarkPodsNotReady: true}})
	u.pass(t)
	rec.apiCalls(u.api)
	// The fencing reconciler, through one incident: the document, the
	// taint, its verification and its removal.
	fz := newFencingFixture(t, true)
	walkFencingIncident(t, fz)
	rec.apiCalls(fz.api)

	s := Scheme()
	for _, obj := range watchedObjects() {
		g, res := rec.resourceOf(t, s, obj)
		rec.add(perm(g, res, "list"), "")
		rec.add(perm(g, res, "watch"), "")
	}

	// Split: the stop switch and leader election live in the controller's
	// namespace (the Role), the rest cluster-wide (the ClusterRole).
	// The nodes' Leases live in kube-node-lease: the detection roles'.
	cluster, namespaced, nodeLeases, fencingDoc := sets.New[string](), sets.New[string](leaderElectionCalls...), sets.New[string](), sets.New[string]()
	var stopSwitchNames []string
	for c := range rec.calls {
		switch {
		case c.perm == "/configmaps:create" || strings.HasPrefix(c.perm, "/configmaps:") && c.name == DefaultFencingDocument:
			fencingDoc.Insert(c.perm)
		case strings.HasPrefix(c.perm, "/configmaps:"):
			namespaced.Insert(c.perm)
			stopSwitchNames = append(stopSwitchNames, c.name)
		case strings.HasPrefix(c.perm, "coordination.k8s.io/leases:"):
			nodeLeases.Insert(c.perm)
		default:
			cluster.Insert(c.perm)
		}
	}
	// Events are created cluster-wide already; the Role adds only patch.
	namespaced.Delete("/events:create")

	clusterRole, role := loadControllerRBAC(t)
	if got := permissions(clusterRole.Rules); !got.Equal(cluster) {
		t.Errorf("ClusterRole rebound-controller differs from the calls the controller makes:\n  granted, never called: %v\n  called, not granted: %v",
			sorted(got.Difference(cluster)), sorted(cluster.Difference(got)))
	}
	if got := permissions(role.Rules); !got.Equal(namespaced) {
		t.Errorf("Role rebound-leader-election differs from the calls:\n  granted, never called: %v\n  called, not granted: %v",
			sorted(got.Difference(namespaced)), sorted(namespaced.Difference(got)))
	}
	if got := detectionPermissions(t)["Role/kube-node-lease"]; !got.Equal(nodeLeases) {
		t.Errorf("Role rebound-node-leases differs from the calls on the nodes' Leases:\n  granted, never called: %v\n  called, not granted: %v",
			sorted(got.Difference(nodeLeases)), sorted(nodeLeases.Difference(got)))
	}
	if got := detectionPermissions(t)["Role/rebound-system"]; !got.Equal(fencingDoc) {
		t.Errorf("Role rebound-fencing-document differs from the calls on the fencing document:\n  granted, never called: %v\n  called, not granted: %v",
			sorted(got.Difference(fencingDoc)), sorted(fencingDoc.Difference(got)))
	}
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "configmaps") {
			slices.Sort(stopSwitchNames)
			if names := slices.Compact(stopSwitchNames); !slices.Equal(rule.ResourceNames, names) {
				t.Errorf("configmaps get is granted for %v, the controller reads %v (the stop switch only)", rule.ResourceNames, names)
			}
		}
	}
}

func sorted(s sets.Set[string]) []string { return sets.List(s) }

// permissions flattens RBAC rules to "group/resource:verb".
func permissions(rules []rbacv1.PolicyRule) sets.Set[string] {
	out := sets.New[string]()
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out.Insert(perm(g, res, v))
				}
			}
		}
	}
	return out
}

// loadControllerRBAC reads the controller's ClusterRole and Role from
// deploy/rbac.
func loadControllerRBAC(t *testing.T) (*rbacv1.ClusterRole, *rbacv1.Role) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "rbac", "controller_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cr *rbacv1.ClusterRole
	var role *rbacv1.Role
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			t.Fatal(err)
		}
		switch kind.Kind {
		case "ClusterRole":
			cr = &rbacv1.ClusterRole{}
			err = yaml.UnmarshalStrict(doc, cr)
		case "Role":
			role = &rbacv1.Role{}
			err = yaml.UnmarshalStrict(doc, role)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if cr == nil || cr.Name != "rebound-controller" || role == nil || role.Name != "rebound-leader-election" {
		t.Fatalf("deploy/rbac/controller_role.yaml must hold ClusterRole rebound-controller and Role rebound-leader-election")
	}
	return cr, role
}

// TestDetectionRBACMatchesWatches: deploy/rbac/controller_detection.yaml
// grants exactly list and watch of what --lease-plane reads: the Leases of
// kube-node-lease (a Role there, not cluster-wide) and the PeeringReports;
// and get of a Lease, the executor's re-read before a delete a two-plane
// verdict decided (TestRBACMatchesCalls records it); and the fencing
// document in rebound-system.
func TestDetectionRBACMatchesWatches(t *testing.T) {
	s := Scheme()
	rec := &recorder{calls: map[apiCall]bool{}}
	want := map[string]sets.Set[string]{"Role/kube-node-lease": sets.New[string](), "ClusterRole/": sets.New[string]()}
	for obj, scope := range map[client.Object]string{&coordinationv1.Lease{}: "Role/kube-node-lease", &v1alpha1.PeeringReport{}: "ClusterRole/"} {
		g, res := rec.resourceOf(t, s, obj)
		want[scope].Insert(perm(g, res, "list"), perm(g, res, "watch"))
	}
	want["Role/kube-node-lease"].Insert(perm("coordination.k8s.io", "leases", "get"))
	// The fencing document (the member list and open rounds) the fencing
	// reconciler publishes; TestRBACMatchesCalls checks it call by call.
	want["Role/rebound-system"] = sets.New("/configmaps:create", "/configmaps:get", "/configmaps:update")
	got := detectionPermissions(t)
	for scope, w := range want {
		if g := got[scope]; !g.Equal(w) {
			t.Errorf("%s grants %v, the Lease plane reads %v", scope, sorted(g), sorted(w))
		}
	}
	if len(got) != len(want) {
		t.Errorf("controller_detection.yaml has roles %v, want exactly %v", got, want)
	}
}

// detectionPermissions reads the roles of
// deploy/rbac/controller_detection.yaml, by "Kind/namespace".
func detectionPermissions(t *testing.T) map[string]sets.Set[string] {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "rbac", "controller_detection.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]sets.Set[string]{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			Kind     string
			Metadata struct{ Namespace string }
			Rules    []rbacv1.PolicyRule
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "Role" || obj.Kind == "ClusterRole" {
			got[obj.Kind+"/"+obj.Metadata.Namespace] = permissions(obj.Rules)
		}
	}
	return got
}
