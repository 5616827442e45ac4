package controller

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/api/v1alpha1"
	"rebound/pkg/policyfile"
	"rebound/pkg/zone"
)

var recoveryT0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// recoveryFixture is one Ready node, one node NotReady for a minute (not
// tainted yet), and a critical Deployment's pod on the dead node with
// upstream's 300 s toleration: upstream will not move it within the
// default policy's 30 s, so rebound must delete it, once.
func recoveryFixture() []client.Object {
	node := func(name string, ready corev1.ConditionStatus, since time.Time) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}, CreationTimestamp: metav1.NewTime(recoveryT0.Add(-time.Hour))},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since)}}},
		}
	}
	labels := map[string]string{"k8s-app": "coredns"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", UID: "dep-uid", Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1},
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-1", Namespace: "kube-system", UID: "rs-uid", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "coredns", UID: "dep-uid", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-1-abc", Namespace: "kube-system", UID: "pod-uid", Labels: labels,
			// What keeps a deleted pod on a dead node: nothing confirms
			// its end, so it stays Terminating.
			Finalizers:      []string{"test.rebound.dev/dead-kubelet"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "coredns-1", UID: "rs-uid", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-1", PriorityClassName: "system-cluster-critical",
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	return []client.Object{
		node("node-0", corev1.ConditionTrue, recoveryT0.Add(-time.Hour)),
		node("node-1", corev1.ConditionUnknown, recoveryT0.Add(-time.Minute)),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		d, rs, pod, policyfile.Default(),
	}
}

func newRecoveryForTest(c client.Client, clk *clocktesting.FakeClock) (*RecoveryReconciler, *events.FakeRecorder) {
	rec := events.NewFakeRecorder(100)
	return &RecoveryReconciler{client: c, reader: c, recorder: rec, clock: clk, announced: map[string]bool{},
		opts: RecoveryOptions{ZoneConfig: zone.DefaultConfig()}}, rec
}


// TestRecoveryReconcileActsOnceAndSurvivesRestart: the first pass deletes
// the stranded pod (with the pod's UID as precondition), records one Event
// and one status record; a second pass, and a pass of a new reconciler (a
// restarted controller, no memory), find the rescue in flight in the
// cluster itself (the pod Terminating) and repeat nothing.
func TestRecoveryReconcileActsOnceAndSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(Scheme()).
		WithObjects(recoveryFixture()...).
		WithStatusSubresource(&v1alpha1.RecoveryPolicy{}).
		WithIndex(&corev1.Pod{}, podNodeIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
	clk := clocktesting.NewFakeClock(recoveryT0)
	r, rec := newRecoveryForTest(c, clk)

	type state struct {
		terminating bool
		records     int
		rescues     int64
		events      int
	}
	read := func(rec *events.FakeRecorder, before int) state {
		t.Helper()
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "coredns-1-abc"}, &p); err != nil {
			t.Fatalf("the stranded pod is gone: %v", err)
		}
		var pol v1alpha1.RecoveryPolicy
		if err := c.Get(ctx, types.NamespacedName{Name: "default"}, &pol); err != nil {
			t.Fatal(err)
		}
		return state{terminating: p.DeletionTimestamp != nil, records: len(pol.Status.LastActions), rescues: pol.Status.RescuesTotal,
			events: before + len(peeringDrain(rec))}
	}

	res, err := r.Reconcile(ctx, recoveryKey)
	if err != nil {
		t.Fatal(err)
	}
	first := read(rec, 0)
	if !first.terminating || first.records != 1 || first.rescues != 1 || first.events != 1 {
		t.Fatalf("first pass: %+v, want the pod deleted, one record, one rescue, one Event", first)
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("first pass requeues after %s, want a look again soon", res.RequeueAfter)
	}

	clk.Step(5 * time.Second)
	if _, err := r.Reconcile(ctx, recoveryKey); err != nil {
		t.Fatal(err)
	}
	if second := read(rec, first.events); second != first {
		t.Errorf("second pass changed something: %+v, after the first %+v", second, first)
	}

	clk.Step(5 * time.Second)
	restarted, rec2 := newRecoveryForTest(c, clk)
	if _, err := restarted.Reconcile(ctx, recoveryKey); err != nil {
		t.Fatal(err)
	}
	if third := read(rec2, first.events); third != first {
		t.Errorf("a restarted controller repeated something: %+v, after the first %+v", third, first)
	}
}
