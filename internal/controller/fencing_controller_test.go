package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
)

type fencingFixture struct {
	r       *FencingReconciler
	api     *kfake.Clientset
	reports client.Client
	clock   *tickingClock
	verdict map[string]liveness.NodeVerdict
}

var fencingMembers = []string{"node-0", "node-1", "node-2", "node-3"}

func fencingNode(name, boot string, ready bool) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: boot},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
}

func fencingReport(name string, armed bool, ts ...v1alpha1.FencingTestimony) *v1alpha1.PeeringReport {
	r := &v1alpha1.PeeringReport{ObjectMeta: metav1.ObjectMeta{Name: name}, Fencing: &v1alpha1.FencingReport{
		Armed: armed, WatchdogSeconds: 10, SanctionSeconds: 16, BootID: name + "-b1",
		Lists: []v1alpha1.MemberList{{Number: 1, Members: fencingMembers}}, Testimonies: ts}}
	return r
}

func newFencingFixture(t *testing.T, armed bool) *fencingFixture {
	t.Helper()
	f := &fencingFixture{clock: &tickingClock{t: now}, verdict: map[string]liveness.NodeVerdict{}}
	var objs []runtime.Object
	var reports []client.Object
	for _, n := range fencingMembers {
		objs = append(objs, fencingNode(n, n+"-b1", n != "node-3"),
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: n}})
		reports = append(reports, fencingReport(n, n != "node-3" || armed))
		f.verdict[n] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: now}
	}
	f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: now}
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db-0", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: corev1.PodSpec{NodeName: "node-3"}},
		// A node agent's DaemonSet pod tolerates every taint: the
		// out-of-service taint never evicts it, and on the node's next
		// boot its kubelet runs the same pod again. It never blocks the
		// taint's removal.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "agent-node-3", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec: corev1.PodSpec{NodeName: "node-3", Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}})
	f.api = kfake.NewSimpleClientset(objs...)
	f.reports = fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(reports...).Build()
	var cacheObjs []client.Object
	for _, n := range fencingMembers {
		cacheObjs = append(cacheObjs, fencingNode(n, n+"-b1", n != "node-3"))
	}
	cache := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(cacheObjs...).Build()
	targets := NewFencingTargets()
	targets.Set([]rescue.FencingTarget{{Node: "node-3", Pods: 1, Due: true}})
	f.r = newFencingReconciler(cache, f.reports, FencingOptions{
		Targets: targets, Document: types.NamespacedName{Namespace: "rebound-system", Name: DefaultFencingDocument},
		StopSwitch: types.NamespacedName{Namespace: "rebound-system", Name: DefaultStopSwitch},
		Clock:      f.clock, APIClient: f.api,
		Liveness: func(context.Context, []*corev1.Node, time.Time) liveness.Assessment {
			return liveness.Assessment{Nodes: f.verdict}
		},
	})
	return f
}

func (f *fencingFixture) pass(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), fencingKey)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *fencingFixture) advance(d time.Duration) {
	f.clock.mu.Lock()
	f.clock.t = f.clock.t.Add(d)
	f.clock.mu.Unlock()
}

func (f *fencingFixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := f.api.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// setNode writes n as the world (kubelet, a person) would, through the
// tracker, so that the recorded calls are the reconciler's alone.
func (f *fencingFixture) setNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	if err := f.api.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
}

func (f *fencingFixture) document(t *testing.T) fencing.Document {
	t.Helper()
	cm, err := f.api.CoreV1().ConfigMaps("rebound-system").Get(context.Background(), DefaultFencingDocument, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := fencing.ParseDocument([]byte(cm.Data[fencing.DocumentKey]))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// testify has the members answer round about node-3, silent for d.
func (f *fencingFixture) testify(t *testing.T, round string, d time.Duration, members ...string) {
	t.Helper()
	for _, m := range members {
		var r v1alpha1.PeeringReport
		if err := f.reports.Get(context.Background(), client.ObjectKey{Name: m}, &r); err != nil {
			t.Fatal(err)
		}
		r.Fencing.Testimonies = []v1alpha1.FencingTestimony{{Node: "node-3", Round: round, SilentForMilliseconds: d.Milliseconds()}}
		if err := f.reports.Update(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
}

func hasOutOfService(n *corev1.Node) bool { return outOfServiceTaint(n) != nil }

// TestFencingTaintsVerifiesAndUntaints walks one incident: node-3 dead on
// both planes, armed; the reconciler waits T + 2W + margin, asks the
// members, taints on a strict majority's testimony, verifies on a re-read,
// and takes the taint off only once node-3 is back on a new boot.
func TestFencingTaintsVerifiesAndUntaints(t *testing.T) {
	walkFencingIncident(t, newFencingFixture(t, true))
}

// walkFencingIncident plays one incident through f and checks each step.
func walkFencingIncident(t *testing.T, f *fencingFixture) {
	t.Helper()
	res := f.pass(t)
	if hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("tainted before the wait")
	}
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	if res.RequeueAfter <= 0 || res.RequeueAfter > wait {
		t.Fatalf("requeue after %s, want the wait (%s)", res.RequeueAfter, wait)
	}
	if d := f.document(t); d.List.Number != 1 || len(d.List.Members) != 4 || len(d.Rounds) != 0 {
		t.Fatalf("document = %+v, want the four members and no round", d)
	}
	f.advance(wait)
	f.pass(t)
	d := f.document(t)
	if len(d.Rounds) != 1 || d.Rounds[0].Node != "node-3" {
		t.Fatalf("document rounds = %+v, want one about node-3", d.Rounds)
	}
	round := d.Rounds[0].Round
	// One witness is not a majority of three.
	f.testify(t, round, 2*wait, "node-0")
	f.pass(t)
	if hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("tainted on one member's testimony")
	}
	f.testify(t, round, 2*wait, "node-1")
	f.pass(t)
	n := f.node(t, "node-3")
	if !hasOutOfService(n) || n.Annotations[fencing.AnnotationFencedBoot] != "node-3-b1" {
		t.Fatalf("node-3 after a majority testified: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if rescue.Fenced(n) {
		t.Fatal("fenced before the re-read verified the taint")
	}
	f.pass(t)
	if n := f.node(t, "node-3"); !rescue.Fenced(n) || n.Annotations[fencing.AnnotationVerified] != round {
		t.Fatalf("after the re-read: annotations %v, want verified by %s", n.Annotations, round)
	}
	// Back on the same boot: the taint stays.
	f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: now}
	n = f.node(t, "node-3")
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	f.setNode(t, n)
	f.pass(t)
	if !hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("the taint came off on the same boot")
	}
	// A new boot, but an old pod remains.
	n = f.node(t, "node-3")
	n.Status.NodeInfo.BootID = "node-3-b2"
	f.setNode(t, n)
	f.pass(t)
	if !hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("the taint came off while an old pod remains")
	}
	// The world's changes go through the tracker, so that the recorded
	// calls are the reconciler's alone.
	if err := f.api.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "db", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.pass(t)
	n = f.node(t, "node-3")
	if hasOutOfService(n) || n.Annotations[fencing.AnnotationFencedBoot] != "" || n.Annotations[fencing.AnnotationVerified] != "" {
		t.Fatalf("back on a new boot, Ready, no old pod: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	var reasons []string
	obj, err := f.api.Tracker().List(corev1.SchemeGroupVersion.WithResource("events"), corev1.SchemeGroupVersion.WithKind("Event"), "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range obj.(*corev1.EventList).Items {
		reasons = append(reasons, e.Reason)
	}
	if got := strings.Join(reasons, ","); !strings.Contains(got, reasonFencingTainted) || !strings.Contains(got, reasonFencingVerified) || !strings.Contains(got, reasonFencingUntainted) {
		t.Fatalf("Events %s, want tainted, verified and untainted", got)
	}
}

// TestFencingHolds: the rows where the reconciler must not taint.
func TestFencingHolds(t *testing.T) {
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	for _, tc := range []struct {
		name  string
		armed bool
		edit  func(f *fencingFixture)
	}{
		// The control: the same passes with nothing wrong taint.
		{"control: nothing wrong", true, nil},
		{"the agent does not report an armed watchdog", false, nil},
		{"no stateful pod is due yet", true, func(f *fencingFixture) {
			f.r.opts.Targets.Set([]rescue.FencingTarget{{Node: "node-3", Pods: 1}})
		}},
		{"the judge no longer says dead", true, func(f *fencingFixture) {
			f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Unknown}
		}},
		{"the witnesses' Leases do not renew", true, func(f *fencingFixture) {
			for _, m := range []string{"node-0", "node-1", "node-2"} {
				f.verdict[m] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseStale: true, LeaseRenewSeen: now}
			}
		}},
		{"the node's Lease was written since the round's read", true, func(f *fencingFixture) {
			l, _ := f.api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "node-3", metav1.GetOptions{})
			l.Labels = map[string]string{"touched": "yes"}
			l.ResourceVersion = "999"
			_, _ = f.api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(context.Background(), l, metav1.UpdateOptions{})
		}},
		{"the controller runs with --dry-run", true, func(f *fencingFixture) { f.r.opts.DryRun = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFencingFixture(t, tc.armed)
			f.pass(t)
			f.advance(wait)
			f.pass(t)
			round := "node-3-1"
			if d := f.document(t); len(d.Rounds) == 1 {
				round = d.Rounds[0].Round
			}
			if tc.edit != nil {
				tc.edit(f)
			}
			f.testify(t, round, 2*wait, "node-0", "node-1", "node-2")
			f.pass(t)
			f.pass(t)
			want := tc.armed && tc.edit == nil
			if n := f.node(t, "node-3"); hasOutOfService(n) != want {
				t.Fatalf("tainted %v, want %v: %v", hasOutOfService(n), want, n.Spec.Taints)
			}
		})
	}
}
