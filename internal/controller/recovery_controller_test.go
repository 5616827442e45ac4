package controller

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
)

var errFake = errors.New("injected API failure")

var now = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// recoveryWorld is a cluster with one of each action due: coredns's pod on
// NotReady node-3 (Delete), etcd-0 on fenced node-4 (ForceDelete), and
// Deployment web left at 0 by a scale bounce (ScaleRestore).
func recoveryWorld() []client.Object {
	ready := func(name string, status corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
		if status != corev1.ConditionTrue {
			// kube-controller-manager's, at once.
			taints = append(taints, rescue.NotReadyTaint(status))
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.kubernetes.io/zone": "a"}},
			Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
				LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Minute))}}}}
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		ready("node-0", corev1.ConditionTrue),
		ready("node-1", corev1.ConditionUnknown),
		ready("node-2", corev1.ConditionUnknown),
		ready("node-3", corev1.ConditionUnknown),
		ready("node-4", corev1.ConditionUnknown, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}),
		&v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: v1alpha1.RecoveryPolicySpec{
			Critical:           v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}},
			MaxUnavailableTime: &metav1.Duration{Duration: 30 * time.Second},
		}},
	}
	ctl := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(kind + "-" + name), Controller: ptr.To(true)}}
	}
	for _, d := range []struct {
		name, node  string
		replicas    int32
		annotations map[string]string
	}{{"coredns", "node-3", 1, nil}, {"web", "", 0, map[string]string{rescue.ScaleBounceAnnotation: "1"}}} {
		objs = append(objs,
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: d.name, UID: types.UID("Deployment-" + d.name), Annotations: d.annotations},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To(d.replicas)}},
			&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: d.name + "-1", UID: types.UID("ReplicaSet-" + d.name + "-1"),
				OwnerReferences: ctl("Deployment", d.name)}})
		if d.node != "" {
			objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: d.name + "-1-x", UID: types.UID("pod-" + d.name),
				OwnerReferences: ctl("ReplicaSet", d.name+"-1")}, Spec: corev1.PodSpec{NodeName: d.node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
		}
	}
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-0", UID: "pod-etcd-0",
		OwnerReferences: ctl("StatefulSet", "etcd")}, Spec: corev1.PodSpec{NodeName: "node-4"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	return objs
}

// recorder collects the API calls of a test's clients.
type recorder struct{ calls map[apiCall]bool }

func newTestReconciler(t *testing.T, rec *recorder, objs []client.Object) (*RecoveryReconciler, client.Client, *kfake.Clientset) {
	t.Helper()
	s := Scheme()
	base := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&v1alpha1.RecoveryPolicy{}).
		WithIndex(&corev1.Pod{}, podNodeIndex, func(o client.Object) []string {
			if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				return []string{p.Spec.NodeName}
			}
			return nil
		}).
		// The apiserver selects every kind by metadata.name; the fake
		// client only by a registered index.
		WithIndex(&v1alpha1.RecoveryPolicy{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		Build()
	var runtimeObjs []runtime.Object
	for _, o := range objs {
		if _, ours := o.(*v1alpha1.RecoveryPolicy); !ours {
			runtimeObjs = append(runtimeObjs, o.DeepCopyObject())
		}
	}
	api := kfake.NewSimpleClientset(runtimeObjs...)
	cached := rec.cachedClient(t, s, base)
	reader := rec.uncachedReader(t, s, base)
	r := newRecoveryReconciler(cached, reader, RecoveryOptions{
		APIClient:  api,
		Clock:      clocktesting.NewFakePassiveClock(now),
		StopSwitch: types.NamespacedName{Namespace: "rebound-system", Name: DefaultStopSwitch},
	})
	return r, base, api
}

// TestReconcileTwiceRepeatsNothing: a pass applies the three due actions;
// a second pass on the same, stale cache (it has not seen the deletes or
// the update yet) plans them again, and the executor's re-reads and
// preconditions find them done: no second record, no second Event.
func TestReconcileTwiceRepeatsNothing(t *testing.T) {
	rec := &recorder{calls: map[apiCall]bool{}}
	r, base, api := newTestReconciler(t, rec, recoveryWorld())
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	for pass := 1; pass <= 2; pass++ {
		res, err := r.Reconcile(ctx, recoveryKey)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if res.RequeueAfter <= 0 || res.RequeueAfter > 2*time.Second {
			t.Errorf("pass %d: RequeueAfter %v, want a quick look after acting", pass, res.RequeueAfter)
		}
	}
	var pol v1alpha1.RecoveryPolicy
	if err := base.Get(ctx, client.ObjectKey{Name: "default"}, &pol); err != nil {
		t.Fatal(err)
	}
	if pol.Status.RescuesTotal != 3 || len(pol.Status.LastActions) != 3 {
		t.Errorf("status: %d rescues, %d records, want 3 and 3: %+v", pol.Status.RescuesTotal, len(pol.Status.LastActions), pol.Status.LastActions)
	}
	for _, a := range pol.Status.LastActions {
		if a.Result != rescue.ResultSucceeded {
			t.Errorf("record %+v: result %q, want %q (as the API documents)", a, a.Result, rescue.ResultSucceeded)
		}
	}
	evs, _ := api.CoreV1().Events("kube-system").List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 3 {
		var reasons []string
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason)
		}
		t.Errorf("events %v, want 3, one per action", reasons)
	}
	if _, err := api.CoreV1().Pods("kube-system").Get(ctx, "coredns-1-x", metav1.GetOptions{}); err == nil {
		t.Error("coredns's stranded pod not deleted")
	}
	web, _ := api.AppsV1().Deployments("kube-system").Get(ctx, "web", metav1.GetOptions{})
	if *web.Spec.Replicas != 1 {
		t.Errorf("web not restored: %d replicas", *web.Spec.Replicas)
	}
}

// TestErrorsRequeueAtNextCheck: a failing action is retried within
// retryAfterError, not after controller-runtime's backoff, and the
// reconciler returns no error (which would trigger that backoff).
func TestErrorsRequeueAtNextCheck(t *testing.T) {
	rec := &recorder{calls: map[apiCall]bool{}}
	r, _, api := newTestReconciler(t, rec, recoveryWorld())
	api.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errFake
	})
	res, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), recoveryKey)
	if err != nil {
		t.Fatalf("Reconcile returned %v: errors must requeue, not back off", err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > retryAfterError {
		t.Errorf("RequeueAfter %v, want within %v", res.RequeueAfter, retryAfterError)
	}
}

// TestStatusWriteFromStaleCacheKeepsRecords: a pass whose cached policy
// has not seen the previous pass's status write yet must not replace that
// pass's records (status.lastActions is a list, which a merge patch
// replaces whole): its write conflicts, and it puts its records on top of
// the policy as the API has it.
func TestStatusWriteFromStaleCacheKeepsRecords(t *testing.T) {
	rec := &recorder{calls: map[apiCall]bool{}}
	r, base, _ := newTestReconciler(t, rec, recoveryWorld())
	ctx := context.Background()
	var stale v1alpha1.RecoveryPolicy
	if err := base.Get(ctx, client.ObjectKey{Name: "default"}, &stale); err != nil {
		t.Fatal(err)
	}
	record := func(pod string) v1alpha1.ActionRecord {
		return v1alpha1.ActionRecord{Time: metav1.NewTime(now), Action: v1alpha1.RecordedDeleteAndReplace, Pod: pod, Result: rescue.ResultSucceeded}
	}
	rep := rescue.PolicyReport{Name: "default", Valid: true}
	if err := r.writeStatus(ctx, stale.DeepCopy(), rep, []v1alpha1.ActionRecord{record("kube-system/a")}); err != nil {
		t.Fatal(err)
	}
	if err := r.writeStatus(ctx, stale.DeepCopy(), rep, []v1alpha1.ActionRecord{record("kube-system/b")}); err != nil {
		t.Fatalf("second write from the stale policy: %v", err)
	}
	var got v1alpha1.RecoveryPolicy
	if err := base.Get(ctx, client.ObjectKey{Name: "default"}, &got); err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, a := range got.Status.LastActions {
		pods = append(pods, a.Pod)
	}
	if got.Status.RescuesTotal != 2 || !slices.Equal(pods, []string{"kube-system/b", "kube-system/a"}) {
		t.Errorf("status after two passes: rescuesTotal %d, records %v; want 2 and [kube-system/b kube-system/a]", got.Status.RescuesTotal, pods)
	}
}
