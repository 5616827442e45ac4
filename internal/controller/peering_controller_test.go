package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

var peeringT0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func peeringTestNode(name, ip string, ready bool, since time.Time, lbls map[string]string) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}},
		},
	}
}

func newPeeringForTest(c client.Client, clk *clocktesting.FakeClock) (*PeeringReconciler, *events.FakeRecorder) {
	if !c.Scheme().IsGroupRegistered("rebound.dev") {
		panic("build the fake client WithScheme(Scheme())")
	}
	rec := events.NewFakeRecorder(100)
	opts := PeeringOptions{Config: peering.Config{PruneGracePeriod: 40 * time.Second}, Clock: clk, Tracker: sawTransitions(c)}.withDefaults()
	return &PeeringReconciler{client: c, reader: c, recorder: rec, opts: opts}, rec
}

// sawTransitions is the tracker of a controller that has watched the
// nodes since before their last transitions: its first sight of each
// state is the transition itself.
func sawTransitions(c client.Client) *liveness.Tracker {
	var list corev1.NodeList
	if err := c.List(context.Background(), &list); err != nil {
		panic(err)
	}
	tr := &liveness.Tracker{}
	for _, n := range kube.LivenessNodes(pointers(list.Items)) {
		tr.Observe([]liveness.Node{n}, n.Transition)
	}
	return tr
}

func peeringLabels(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	var list corev1.NodeList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range list.Items {
		out[n.Name] = n.Labels[peering.LabelInSet]
	}
	return out
}

func peeringDrain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestPeeringReconcilePublishesIdempotentlyAndSurvivesRestart: the set is
// published as labels with one Event per change; a second run changes
// nothing; a new reconciler (a restarted controller) reads the state
// ConfigMap and keeps the damping history.
func TestPeeringReconcilePublishesIdempotentlyAndSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
		peeringTestNode("a", "10.0.0.1", true, peeringT0.Add(-time.Hour), nil),
		peeringTestNode("b", "10.0.0.2", false, peeringT0.Add(-time.Minute), nil),    // NotReady past 40 s
		peeringTestNode("c", "10.0.0.3", false, peeringT0.Add(-10*time.Second), nil), // within grace
		peeringTestNode("d", "10.0.0.4", false, peeringT0.Add(-time.Hour), map[string]string{peering.LabelKeepInMesh: "true"}),
	).Build()
	clk := clocktesting.NewFakeClock(peeringT0)
	r, rec := newPeeringForTest(c, clk)

	res, err := r.Reconcile(ctx, peeringKey)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "true", "b": "false", "c": "true", "d": "true"}
	if got := peeringLabels(t, c); !peeringEqualMaps(got, want) {
		t.Fatalf("labels = %v, want %v", got, want)
	}
	if evs := peeringDrain(rec); len(evs) != 4 || !strings.Contains(strings.Join(evs, "\n"), "PeerSetRemoved") {
		t.Errorf("events = %v, want one per labelled node, b's PeerSetRemoved", evs)
	}
	// c's grace ends 30 s from now: the requeue comes then.
	if res.RequeueAfter != 30*time.Second {
		t.Errorf("RequeueAfter = %v, want 30s", res.RequeueAfter)
	}

	// Idempotent: the same run again changes nothing and says nothing.
	if _, err := r.Reconcile(ctx, peeringKey); err != nil {
		t.Fatal(err)
	}
	if evs := peeringDrain(rec); len(evs) != 0 {
		t.Errorf("second run emitted %v", evs)
	}

	// c passes its grace and is removed; then it returns Ready.
	clk.Step(31 * time.Second)
	if _, err := r.Reconcile(ctx, peeringKey); err != nil {
		t.Fatal(err)
	}
	if got := peeringLabels(t, c)["c"]; got != "false" {
		t.Fatalf("c = %q after its grace, want false", got)
	}
	peeringSetReady(t, c, "c", true, clk.Now())
	if _, err := r.Reconcile(ctx, peeringKey); err != nil {
		t.Fatal(err)
	}

	// A restarted controller: new reconciler, same API. c goes NotReady
	// again; the damping (one removal on record) doubles its grace to
	// 80 s, so after 50 s it is still in the set.
	r2, _ := newPeeringForTest(c, clk)
	clk.Step(time.Second)
	peeringSetReady(t, c, "c", false, clk.Now())
	clk.Step(50 * time.Second)
	if _, err := r2.Reconcile(ctx, peeringKey); err != nil {
		t.Fatal(err)
	}
	if got := peeringLabels(t, c)["c"]; got != "true" {
		t.Errorf("c = %q 50 s into its second NotReady spell, want true (damped grace 80 s)", got)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: DefaultPeeringNamespace, Name: DefaultPeeringStateName}, &cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data[peeringStateKey], `"removals"`) {
		t.Errorf("state ConfigMap lacks the removal history: %s", cm.Data[peeringStateKey])
	}
}

// TestPeeringPublishesOneDocumentAndFreezes: the set goes out as one
// ConfigMap document with a generation that grows only on change; a fresh
// report from a Ready peer keeps a NotReady node in; when every node goes
// NotReady the set is frozen (nobody leaves, reason published); the stop
// switch holds every change.
func TestPeeringPublishesOneDocumentAndFreezes(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
		peeringTestNode("a", "10.0.0.1", true, peeringT0.Add(-time.Hour), nil),
		peeringTestNode("b", "10.0.0.2", true, peeringT0.Add(-time.Hour), nil),
		peeringTestNode("c", "10.0.0.3", true, peeringT0.Add(-time.Hour), nil),
	).Build()
	clk := clocktesting.NewFakeClock(peeringT0)
	r, _ := newPeeringForTest(c, clk)
	r.opts.StopSwitch = types.NamespacedName{Namespace: DefaultPeeringNamespace, Name: "rebound-stop"}

	doc := func() peering.PeerSet {
		t.Helper()
		var cm corev1.ConfigMap
		if err := c.Get(ctx, r.opts.PeerSet, &cm); err != nil {
			t.Fatal(err)
		}
		s, err := kube.PeerSetFromConfigMap(&cm)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, peeringKey); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if d := doc(); d.Generation != 1 || len(d.Peers) != 3 || d.Frozen {
		t.Fatalf("first publish: %+v", d)
	}
	run()
	if d := doc(); d.Generation != 1 {
		t.Fatalf("an unchanged set was republished: generation %d", d.Generation)
	}

	// c dies; a reports a session with c re-established after c's
	// NotReady transition: c stays in past its grace.
	peeringSetReady(t, c, "c", false, clk.Now())
	run() // the controller sees c NotReady as it happens
	clk.Step(time.Minute)
	rep := kube.ReportToAPI(peering.Report{Reporter: "a", ObservedAt: clk.Now(), Sessions: []peering.Session{{Peer: "c", State: "Established", Since: clk.Now().Add(-10 * time.Second)}}})
	if err := c.Create(ctx, rep); err != nil {
		t.Fatal(err)
	}
	run()
	d := doc()
	if len(d.Peers) != 3 || d.Peers[2].Alive == "" || d.Peers[2].Ready {
		t.Fatalf("c with alive evidence: %+v", d.Peers)
	}

	// Every node NotReady: full disruption. Long past the grace and the
	// report's age, still nobody leaves.
	peeringSetReady(t, c, "a", false, clk.Now())
	peeringSetReady(t, c, "b", false, clk.Now())
	clk.Step(10 * time.Minute)
	run()
	d = doc()
	if len(d.Peers) != 3 || !d.Frozen || !strings.Contains(d.FrozenReason, "full disruption") || d.Floor > 3 {
		t.Fatalf("full disruption: want 3 members, frozen: %+v", d)
	}
	if got := peeringLabels(t, c); got["a"] != "true" || got["b"] != "true" || got["c"] != "true" {
		t.Fatalf("labels in full disruption: %v", got)
	}

	// a returns: no longer a full disruption. b and c were NotReady
	// through it, so their grace counts from a's return: nobody leaves,
	// and nothing needs freezing.
	peeringSetReady(t, c, "a", true, clk.Now())
	run()
	if d := doc(); len(d.Peers) != 3 || d.Frozen || d.Peers[1].Reason != "InGracePeriod" || d.Peers[2].Reason != "InGracePeriod" {
		t.Fatalf("a back after a full disruption: want b and c kept in a fresh grace: %+v", d)
	}

	// The stop switch holds every change: b returns Ready, c is deleted,
	// nothing is published.
	gen := doc().Generation
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultPeeringNamespace, Name: "rebound-stop"}}); err != nil {
		t.Fatal(err)
	}
	peeringSetReady(t, c, "b", true, clk.Now())
	res, err := r.Reconcile(ctx, peeringKey)
	if err != nil {
		t.Fatal(err)
	}
	if d := doc(); d.Generation != gen || res.RequeueAfter != stoppedRecheck {
		t.Fatalf("stop switch: generation %d -> %d, requeue %v", gen, d.Generation, res.RequeueAfter)
	}
	if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultPeeringNamespace, Name: "rebound-stop"}}); err != nil {
		t.Fatal(err)
	}
	run()
	// a and b Ready: c, NotReady through the full disruption, is still
	// within the grace counted from a's return (a partition healing node
	// by node prunes nobody who is on the way back).
	if d := doc(); d.Frozen || len(d.Peers) != 3 || d.Peers[2].Reason != "InGracePeriod" {
		t.Fatalf("after the stop switch: want c kept in its grace: %+v", d)
	}
	// Past that grace (the node grace period after a stall, 50 s), c,
	// NotReady and alone leaving (1 of 3), leaves.
	clk.Step(51 * time.Second)
	run()
	if d := doc(); d.Generation == gen || d.Frozen || len(d.Peers) != 2 {
		t.Fatalf("after the stop switch and the grace: %+v", d)
	}
}

func peeringSetReady(t *testing.T, c client.Client, name string, ready bool, at time.Time) {
	t.Helper()
	var n corev1.Node
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(at)}}
	if err := c.Status().Update(context.Background(), &n); err != nil {
		t.Fatal(err)
	}
}

func peeringEqualMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestPeeringErrorsRequeueAtNextCheck: the peering reconciler shares the
// recovery reconciler's error policy: a failed write is logged and the
// pass comes back within retryAfterError (or at the plan's next check if
// sooner), never through controller-runtime's growing backoff; a
// configuration error (the Calico API not served) keeps the next check.
func TestPeeringErrorsRequeueAtNextCheck(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	base := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
		peeringTestNode("a", "10.0.0.1", true, peeringT0.Add(-time.Hour), nil),
		peeringTestNode("b", "10.0.0.2", false, peeringT0.Add(-10*time.Second), nil),
	).Build()
	failing := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return errors.New("apiserver unavailable")
		},
	})
	clk := clocktesting.NewFakeClock(peeringT0)
	r, _ := newPeeringForTest(base, clk)
	r.client = failing
	res, err := r.Reconcile(ctx, peeringKey)
	if err != nil {
		t.Fatalf("Reconcile returned %v: errors must requeue, not back off", err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > retryAfterError {
		t.Errorf("RequeueAfter %v, want within %v", res.RequeueAfter, retryAfterError)
	}

	terminal := reconcile.TerminalError(errors.New("the Calico API is not served"))
	got, err := afterError(ctrl.Log, ctrl.Result{RequeueAfter: time.Minute}, fmt.Errorf("pass: %w", terminal))
	if err != nil || got.RequeueAfter != time.Minute {
		t.Errorf("terminal error: result %v, error %v; want the next check kept and nothing returned", got, err)
	}
	mixed := errors.Join(fmt.Errorf("calico: %w", terminal), errors.New("labels: apiserver unavailable"))
	if got, _ := afterError(ctrl.Log, ctrl.Result{RequeueAfter: time.Minute}, mixed); got.RequeueAfter != retryAfterError {
		t.Errorf("a terminal error joined with a transient one: RequeueAfter %v, want %v (the transient part is retried soon)", got.RequeueAfter, retryAfterError)
	}
	allTerm := errors.Join(terminal, fmt.Errorf("wrapped: %w", terminal))
	if got, _ := afterError(ctrl.Log, ctrl.Result{RequeueAfter: time.Minute}, allTerm); got.RequeueAfter != time.Minute {
		t.Errorf("only terminal errors joined: RequeueAfter %v, want the next check (1m) kept", got.RequeueAfter)
	}
}
