package agent

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// LeaseWatch is the Lease plane as this agent sees it (gossip.LeaseSource):
// every node's Lease in kube-node-lease, watched, each renewal timed on
// this agent's clock by the controller's own tracker
// (liveness.LeaseTracker), so that the agent and the controller call a
// Lease stale by one rule (Lease.StaleAt, the same margin). The gossip
// member reads it to witness the nodes the Lease plane lost while its own
// node's Lease renews.
//
// Its cost is the kubelets' renewals: one watch event per node every
// renew interval (10 s by default), 100 a second at 1,000 nodes, to every
// agent, each trimmed on arrival to its name, renew time and duration.
// RBAC: list and watch on leases in kube-node-lease, read only.
type LeaseWatch struct {
	tracker liveness.LeaseTracker
	clock   clock.PassiveClock
	factory informers.SharedInformerFactory
	synced  cache.InformerSynced
}

// NewLeaseWatch builds the watch; Start runs it.
func NewLeaseWatch(client kubernetes.Interface, clk clock.PassiveClock) (*LeaseWatch, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	w := &LeaseWatch{clock: clk, factory: informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(NodeLeaseNamespace))}
	inf := w.factory.Coordination().V1().Leases().Informer()
	_ = inf.SetTransform(trimLease)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, o any) { w.observe(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if l, ok := o.(*coordinationv1.Lease); ok {
				w.tracker.Forget(l.Name)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("node Lease watch: %w", err)
	}
	w.synced = inf.HasSynced
	return w, nil
}

func (w *LeaseWatch) observe(o any) {
	if l, ok := o.(*coordinationv1.Lease); ok {
		renew, duration := kube.LeaseRenewal(l)
		w.tracker.Observe(l.Name, renew, duration, w.clock.Now())
	}
}

// trimLease keeps what the tracker reads.
func trimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: l.ResourceVersion},
		Spec:       coordinationv1.LeaseSpec{RenewTime: l.Spec.RenewTime, LeaseDurationSeconds: l.Spec.LeaseDurationSeconds},
	}, nil
}

// Start runs the watch until ctx ends and waits until it has listed.
// Before that it holds no Lease: no node is lost, this one's Lease is
// unknown, and the member witnesses nobody.
func (w *LeaseWatch) Start(ctx context.Context) error {
	w.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), w.synced) {
		return fmt.Errorf("the node Leases in %s not listed: %w", NodeLeaseNamespace, context.Cause(ctx))
	}
	return nil
}

// Leases is gossip.LeaseSource's.
func (w *LeaseWatch) Leases() map[string]liveness.Lease { return w.tracker.Leases() }
