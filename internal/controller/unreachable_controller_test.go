package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// unreachableWorld: five Ready nodes; node-3 carries someone else's taint
// and two pods, one Ready and one not; node-0 a pod of its own.
func unreachableWorld() []client.Object {
	objs := []client.Object{}
	for _, n := range []string{"node-0", "node-1", "node-2", "node-3", "node-4"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n), ResourceVersion: "5"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if n == "node-3" {
			node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
		}
		objs = append(objs, node)
	}
	pod := func(name, node string, ready corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "9"},
			Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: ready, Reason: "kubelet"}}}}
	}
	return append(objs, pod("coredns-1", "node-3", corev1.ConditionTrue), pod("coredns-2", "node-3", corev1.ConditionFalse),
		pod("dns-3", "node-3", corev1.ConditionUnknown), pod("web-1", "node-0", corev1.ConditionTrue))
}

// unreachableFixture is a reconciler over a fake cache and a fake API that
// start from the same objects; verdict is what Liveness says of node-3
// (the others are Alive).
type unreachableFixture struct {
	r       *UnreachableReconciler
	cache   client.Client
	api     *kfake.Clientset
	verdict liveness.NodeVerdict
}

func newUnreachableFixture(t *testing.T, rec *recorder, objs []client.Object, opts UnreachableOptions) *unreachableFixture {
	t.Helper()
	s := Scheme()
	f := &unreachableFixture{verdict: liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: now.Add(-time.Second), Reason: "dead on both planes"}}
	f.cache = fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	var runtimeObjs []runtime.Object
	for _, o := range objs {
		runtimeObjs = append(runtimeObjs, o.DeepCopyObject())
	}
	f.api = kfake.NewSimpleClientset(runtimeObjs...)
	opts.APIClient = f.api
	// Events are named after their object and time, as client-go names
	// them: the clock moves on with every read, as a real one does.
	opts.Clock = &tickingClock{t: now}
	if opts.StopSwitch == (types.NamespacedName{}) {
		opts.StopSwitch = types.NamespacedName{Namespace: "rebound-system", Name: DefaultStopSwitch}
	}
	opts.Liveness = func(_ context.Context, nodes []*corev1.Node, _ time.Time) liveness.Assessment {
		a := liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{}, StaleAt: now.Add(5 * time.Second)}
		for _, n := range nodes {
			a.Nodes[n.Name] = liveness.NodeVerdict{Verdict: liveness.Alive}
		}
		a.Nodes["node-3"] = f.verdict
		return a
	}
	cached, reader := client.Client(f.cache), client.Reader(f.cache)
	if rec != nil {
		cached, reader = rec.cachedClient(t, s, f.cache.(client.WithWatch)), rec.uncachedReader(t, s, f.cache.(client.WithWatch))
	}
	f.r = newUnreachableReconciler(cached, reader, opts)
	return f
}

func (f *unreachableFixture) pass(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), unreachableKey)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *unreachableFixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := f.api.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *unreachableFixture) ready(t *testing.T, name string) corev1.PodCondition {
	t.Helper()
	p, err := f.api.CoreV1().Pods("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c
		}
	}
	return corev1.PodCondition{}
}

func (f *unreachableFixture) writes() []string {
	var out []string
	for _, a := range f.api.Actions() {
		if a.GetVerb() == "patch" {
			out = append(out, a.GetResource().Resource+"/"+a.GetSubresource()+" "+a.(k8stesting.PatchAction).GetName())
		}
	}
	// A node's pods are marked in parallel.
	slices.Sort(out)
	return out
}

func (f *unreachableFixture) eventReasons(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, ns := range []string{"default", "kube-system"} {
		evs, err := f.api.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			out = append(out, e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+" "+e.Reason)
		}
	}
	slices.Sort(out)
	return out
}

// TestUnreachableMarksThenUnmarks: node-3 dead on both planes is tainted
// (its other taint kept) and its Ready pod marked not ready, with an Event
// on the node and on the pod; a second pass on the same stale cache writes
// nothing; once the verdict says alive, the taint comes off and only it.
func TestUnreachableMarksThenUnmarks(t *testing.T) {
	f := newUnreachableFixture(t, nil, unreachableWorld(), UnreachableOptions{Plan: unreachable.Options{MarkPodsNotReady: true}})
	res := f.pass(t)
	n := f.node(t, "node-3")
	if unreachable.Tainted(n) == nil || len(n.Spec.Taints) != 2 || n.Spec.Taints[0].Key != "dedicated" || n.Spec.Taints[1].TimeAdded == nil {
		t.Fatalf("node-3 taints %v, want dedicated kept and rebound's added with timeAdded", n.Spec.Taints)
	}
	if c := f.ready(t, "coredns-1"); c.Status != corev1.ConditionFalse || c.Reason != unreachable.PodReasonNodeUnreachable || !strings.Contains(c.Message, "node-3") {
		t.Errorf("coredns-1 Ready condition %+v, want False with rebound's reason", c)
	}
	if c := f.ready(t, "coredns-2"); c.Reason != "kubelet" {
		t.Errorf("coredns-2 was already not ready and is rewritten: %+v", c)
	}
	if c := f.ready(t, "web-1"); c.Status != corev1.ConditionTrue {
		t.Errorf("a pod of a live node was marked: %+v", c)
	}
	wantWrites := []string{"nodes/ node-3", "pods/status coredns-1", "pods/status dns-3"}
	if got := f.writes(); !slices.Equal(got, wantWrites) {
		t.Errorf("writes %v, want %v", got, wantWrites)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 2*time.Second {
		t.Errorf("RequeueAfter %v, want a quick look after acting", res.RequeueAfter)
	}
	wantEvents := []string{"Node/node-3 " + reasonUnreachableTainted, "Node/node-3 " + reasonPodsMarkedNotReady,
		"Pod/coredns-1 " + reasonPodNodeUnreachable, "Pod/dns-3 " + reasonPodNodeUnreachable}
	if got := f.eventReasons(t); !slices.Equal(got, wantEvents) {
		t.Errorf("events %v, want %v", got, wantEvents)
	}

	// The cache has not seen the writes: the plan asks for the taint
	// again, the API's node says it is there; the pods, read from the
	// API, are marked already.
	f.pass(t)
	if got := f.writes(); !slices.Equal(got, wantWrites) {
		t.Errorf("the second pass wrote again: %v", got)
	}
	if got := f.eventReasons(t); !slices.Equal(got, wantEvents) {
		t.Errorf("the second pass recorded Events again: %v", got)
	}

	// The Lease renewed: the verdict is Alive, rebound's taint comes off,
	// the other stays. The cache now holds what the API holds.
	if err := f.cache.Update(context.Background(), f.node(t, "node-3")); err != nil {
		t.Fatal(err)
	}
	f.verdict = liveness.NodeVerdict{Verdict: liveness.Alive, Reason: "Ready in the API"}
	f.pass(t)
	n = f.node(t, "node-3")
	if unreachable.Tainted(n) != nil || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "dedicated" {
		t.Errorf("node-3 taints %v after the verdict changed, want dedicated alone", n.Spec.Taints)
	}
	if got := f.eventReasons(t); !slices.Contains(got, "Node/node-3 "+reasonUnreachableUntainted) {
		t.Errorf("no %s Event: %v", reasonUnreachableUntainted, got)
	}
}

// TestUnreachableGates: with the stop switch pulled, unreadable, or
// --dry-run, nothing is marked, and an Event says what would be; but a
// taint left from before always comes off: taking it off is the way back
// to upstream, and without rebound no node would carry it.
func TestUnreachableGates(t *testing.T) {
	stop := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rebound-system", Name: DefaultStopSwitch}}
	world := func(objs ...client.Object) []client.Object {
		out := unreachableWorld()
		for _, o := range out {
			if n, ok := o.(*corev1.Node); ok && n.Name == "node-1" {
				n.Spec.Taints, _ = unreachable.WithTaint(n.Spec.Taints, metav1.NewTime(now.Add(-time.Minute)))
			}
		}
		return append(out, objs...)
	}
	for _, tc := range []struct {
		name       string
		objs       []client.Object
		dryRun     bool
		unreadable bool
	}{
		{name: "stop switch pulled", objs: []client.Object{stop}},
		{name: "stop switch unreadable", unreadable: true},
		{name: "--dry-run", dryRun: true},
		{name: "--dry-run and the stop switch", objs: []client.Object{stop}, dryRun: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newUnreachableFixture(t, nil, world(tc.objs...), UnreachableOptions{Plan: unreachable.Options{MarkPodsNotReady: true}, DryRun: tc.dryRun})
			if tc.unreadable {
				f.r.reader = failingConfigMaps{f.r.reader}
			}
			f.pass(t)
			if unreachable.Tainted(f.node(t, "node-3")) != nil || f.ready(t, "coredns-1").Status != corev1.ConditionTrue {
				t.Error("node-3 marked")
			}
			if unreachable.Tainted(f.node(t, "node-1")) != nil {
				t.Error("rebound's taint on a live node kept")
			}
			if got, want := f.writes(), []string{"nodes/ node-1"}; !slices.Equal(got, want) {
				t.Errorf("writes %v, want %v (the taint off, nothing else)", got, want)
			}
			// Each says what it would have done, and what it did.
			want := []string{"Node/node-1 " + reasonUnreachableUntainted, "Node/node-3 " + reasonUnreachableDryRun}
			if got := f.eventReasons(t); !slices.Equal(got, want) {
				t.Errorf("events %v, want %v", got, want)
			}
		})
	}
}

// failingConfigMaps fails every read of a ConfigMap: the stop switch
// cannot be read.
type failingConfigMaps struct{ client.Reader }

func (r failingConfigMaps) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		return apierrors.NewServiceUnavailable("etcd is away")
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestUnreachableHeld: three of five nodes dead at once: none is marked,
// each says why once, in an Event and the held gauge.
func TestUnreachableHeld(t *testing.T) {
	f := newUnreachableFixture(t, nil, unreachableWorld(), UnreachableOptions{})
	dead := f.verdict
	f.r.opts.Liveness = func(_ context.Context, nodes []*corev1.Node, _ time.Time) liveness.Assessment {
		a := liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{}}
		for _, n := range nodes {
			a.Nodes[n.Name] = dead
		}
		a.Nodes["node-0"] = liveness.NodeVerdict{Verdict: liveness.Alive}
		a.Nodes["node-1"] = liveness.NodeVerdict{Verdict: liveness.Alive}
		return a
	}
	f.pass(t)
	f.pass(t)
	if got := f.writes(); len(got) != 0 {
		t.Errorf("marked over the budget: %v", got)
	}
	var held []string
	for _, e := range f.eventReasons(t) {
		if strings.HasSuffix(e, reasonUnreachableHeld) {
			held = append(held, e)
		}
	}
	if want := []string{"Node/node-2 " + reasonUnreachableHeld, "Node/node-3 " + reasonUnreachableHeld, "Node/node-4 " + reasonUnreachableHeld}; !slices.Equal(held, want) {
		t.Errorf("hold Events %v, want one per node %v", held, want)
	}
}

// TestUnreachablePodChangedMeanwhile: a pod whose status moved on since it
// was read (its kubelet is back) is not overwritten: the patch carries the
// version read, and the conflict re-plans.
func TestUnreachablePodChangedMeanwhile(t *testing.T) {
	f := newUnreachableFixture(t, nil, unreachableWorld(), UnreachableOptions{Plan: unreachable.Options{MarkPodsNotReady: true}})
	f.api.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"resourceVersion":"9"`) {
			t.Errorf("pod patch without the version read: %s", a.(k8stesting.PatchAction).GetPatch())
		}
		return true, nil, conflict()
	})
	f.pass(t)
	if c := f.ready(t, "coredns-1"); c.Status != corev1.ConditionTrue {
		t.Errorf("coredns-1 overwritten: %+v", c)
	}
	if !kubestatus.NodeReady(f.node(t, "node-3")) || unreachable.Tainted(f.node(t, "node-3")) == nil {
		t.Error("node-3 not tainted")
	}
}

func conflict() error {
	return apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "coredns-1", errors.New("the object has been modified"))
}

// tickingClock advances a microsecond at every read; the pods of a node
// are marked in parallel, so it is read from several goroutines.
type tickingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond)
	return c.t
}

func (c *tickingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
