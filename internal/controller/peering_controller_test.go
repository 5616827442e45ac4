package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/pkg/peering"
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
	rec := events.NewFakeRecorder(100)
	opts := PeeringOptions{Config: peering.Config{PruneGracePeriod: 40 * time.Second}, Clock: clk}.withDefaults()
	return &PeeringReconciler{client: c, reader: c, recorder: rec, opts: opts}, rec
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
	c := fake.NewClientBuilder().WithObjects(
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

func TestPeeringSnapshotDropsStaleReportsAndRequeuesAtExpiry(t *testing.T) {
	maxAge := time.Minute
	b := peeringTestNode("b", "10.0.0.2", false, peeringT0.Add(-time.Hour), nil)
	a := peeringTestNode("a", "10.0.0.1", true, peeringT0.Add(-time.Hour), nil)
	a.Annotations = map[string]string{peering.AnnotationSessions: peering.SessionReport{Time: peeringT0.Add(-20 * time.Second), Sessions: map[string]string{"b": "Established"}}.Encode()}
	nodes, staleAt := peeringSnapshot([]corev1.Node{*a, *b}, labels.Everything(), peeringT0, maxAge)
	if len(nodes) != 2 || !nodes[0].Sessions["b"] {
		t.Fatalf("a's fresh report that b is Established was dropped: %+v", nodes)
	}
	if want := peeringT0.Add(40*time.Second + time.Millisecond); !staleAt.Equal(want) {
		t.Errorf("staleAt = %v, want %v (when a's report about NotReady b expires)", staleAt, want)
	}
	nodes, _ = peeringSnapshot([]corev1.Node{*a, *b}, labels.Everything(), peeringT0.Add(time.Minute), maxAge)
	if nodes[0].Sessions != nil {
		t.Errorf("a stale report still counts: %+v", nodes[0])
	}
	// A selector leaves other nodes out.
	nodes, _ = peeringSnapshot([]corev1.Node{*a, *b}, labels.SelectorFromSet(labels.Set{"bgp": "on"}), peeringT0, maxAge)
	if len(nodes) != 0 {
		t.Errorf("selector ignored: %+v", nodes)
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
