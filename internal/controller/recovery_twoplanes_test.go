package controller

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// twoPlaneWorld: node-3 is Ready in the API, dead on both planes and
// marked unreachable; coredns's pod runs there under a TwoPlanes policy
// with maxUnavailableTime 0s; node-0 can take the replacement.
func twoPlaneWorld(renew time.Time) []client.Object {
	node := func(name string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"topology.kubernetes.io/zone": "a"}},
			Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}}}
	}
	taints, _ := unreachable.WithTaint(nil, metav1.NewTime(now.Add(-2*time.Second)))
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		node("node-0"), node("node-1"), node("node-3", taints...),
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "node-3"},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}, LeaseDurationSeconds: ptr.To[int32](40)}},
		&v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: v1alpha1.RecoveryPolicySpec{
			Critical:           v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}},
			Detection:          v1alpha1.DetectionTwoPlanes,
			MaxUnavailableTime: &metav1.Duration{},
		}},
	}
	for _, o := range recoveryWorld() {
		switch x := o.(type) {
		case *corev1.Pod:
			if x.Name == "coredns-1-x" {
				x.Spec.NodeName = "node-3"
				objs = append(objs, x)
			}
		case *corev1.Node, *corev1.Namespace, *v1alpha1.RecoveryPolicy:
		default:
			objs = append(objs, o)
		}
	}
	return objs
}

// newTwoPlaneReconciler is newTestReconciler with the Lease plane: node-3
// dead on both planes (verdict), the Leases read from the cache.
func newTwoPlaneReconciler(t *testing.T, rec *recorder, objs []client.Object, verdict *liveness.NodeVerdict) (*RecoveryReconciler, *kfake.Clientset) {
	t.Helper()
	r, _, api := newTestReconciler(t, rec, objs)
	r.opts.Liveness = func(_ context.Context, nodes []*corev1.Node, _ time.Time) liveness.Assessment {
		a := liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{}}
		for _, n := range nodes {
			a.Nodes[n.Name] = liveness.NodeVerdict{Verdict: liveness.Alive, Since: now.Add(-time.Hour)}
		}
		a.Nodes["node-3"] = *verdict
		return a
	}
	r.opts.LeaseRenewTimes = CachedLeaseRenewTimes(r.client)
	r.exec.Verdict = r.currentVerdict
	return r, api
}

// TestTwoPlaneRescue: the pod of a node the API still has Ready is deleted
// under a TwoPlanes policy; the executor's re-read of the Lease refuses it
// when the Lease was renewed after the snapshot.
func TestTwoPlaneRescue(t *testing.T) {
	renew := now.Add(-15 * time.Second)
	dead := &liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: now.Add(-3 * time.Second), Since: now.Add(-time.Hour), Reason: "dead on both planes"}
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)

	r, api := newTwoPlaneReconciler(t, &recorder{calls: map[apiCall]bool{}}, twoPlaneWorld(renew), dead)
	if _, err := r.Reconcile(ctx, recoveryKey); err != nil {
		t.Fatal(err)
	}
	if _, err := api.CoreV1().Pods("kube-system").Get(ctx, "coredns-1-x", metav1.GetOptions{}); err == nil {
		t.Error("the pod of node-3, dead on both planes, was not deleted")
	}

	// The kubelet renewed its Lease after the snapshot's read: refused.
	r, api = newTwoPlaneReconciler(t, &recorder{calls: map[apiCall]bool{}}, twoPlaneWorld(renew), dead)
	lease, err := api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "node-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: renew.Add(10 * time.Second)}
	if _, err := api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, recoveryKey); err != nil {
		t.Fatal(err)
	}
	if _, err := api.CoreV1().Pods("kube-system").Get(ctx, "coredns-1-x", metav1.GetOptions{}); err != nil {
		t.Errorf("deleted although the Lease renewed since the verdict: %v", err)
	}
	evs, _ := api.CoreV1().Events("kube-system").List(ctx, metav1.ListOptions{})
	refused := false
	for _, e := range evs.Items {
		refused = refused || e.Reason == "RescueRefused"
	}
	if !refused {
		t.Error("no RescueRefused Event")
	}
}
