package controller

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// The Lease plane: the kubelet's path to the API, timed on rebound's own
// clock. Every node's kubelet renews its Lease in kube-node-lease every
// quarter of its duration (10 s by default); kube-controller-manager
// marks the node NotReady only after its node grace period (50 s). The
// controller watches the same Leases and records when it saw each
// renewal, so that, with the agents' gossip, it can tell a dead node in
// about one renew interval. At 1,000 nodes that is 100 watch events a
// second, about what kube-controller-manager itself receives; they only
// update the tracker and never start a pass.

// SetupLeasePlane feeds tracker from the nodes' Leases through the
// manager's cache (restricted to kube-node-lease and trimmed, cache.go).
func SetupLeasePlane(mgr ctrl.Manager, tracker *liveness.LeaseTracker, clk clock.PassiveClock) error {
	if clk == nil {
		clk = clock.RealClock{}
	}
	inf, err := mgr.GetCache().GetInformer(context.Background(), &coordinationv1.Lease{})
	if err != nil {
		return fmt.Errorf("Lease informer for the Lease plane: %w", err)
	}
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok && l.Namespace == corev1.NamespaceNodeLease {
			renew, duration := kube.LeaseRenewal(l)
			tracker.Observe(l.Name, renew, duration, clk.Now())
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				tracker.Forget(l.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("Lease plane handler: %w", err)
	}
	return nil
}

// trimLease keeps what the Lease plane reads: name, renew time and
// duration.
func trimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: l.ResourceVersion, UID: l.UID},
		Spec:       coordinationv1.LeaseSpec{RenewTime: l.Spec.RenewTime, LeaseDurationSeconds: l.Spec.LeaseDurationSeconds},
	}, nil
}

// reportContentChanged passes a PeeringReport event unless it only
// refreshes the read times: an agent rewrites an unchanged report now and
// then to show it is alive, and that must not start a pass at 1,000
// nodes. Create and delete pass.
func reportContentChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.PeeringReport)
		n, ok2 := e.ObjectNew.(*v1alpha1.PeeringReport)
		if !ok1 || !ok2 {
			return true
		}
		o, n = o.DeepCopy(), n.DeepCopy()
		for _, r := range []*v1alpha1.PeeringReport{o, n} {
			r.ResourceVersion, r.ManagedFields, r.Generation = "", nil, 0
			r.Report.ObservedAt = metav1.Time{}
			if r.Gossip != nil {
				r.Gossip.ObservedAt = metav1.Time{}
			}
		}
		return !equality.Semantic.DeepEqual(o, n)
	}}
}
