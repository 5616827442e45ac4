package controller

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
	"rebound/pkg/unreachable"
)

// What the recovery reconciler adds for the policies with detection
// TwoPlanes (pkg/rescue): the Leases' renewTimes that a two-plane action
// carries to the executor, the pods of the nodes the API has Ready but
// rebound marked unreachable, and the verdict the executor asks for again
// right before such a delete.

// CachedLeaseRenewTimes reads every node's Lease renewTime from the
// manager's cache of kube-node-lease (the Lease plane's informer,
// SetupLeasePlane), for RecoveryOptions.LeaseRenewTimes.
func CachedLeaseRenewTimes(c client.Reader) func(ctx context.Context) (map[string]time.Time, error) {
	return func(ctx context.Context) (map[string]time.Time, error) {
		var leases coordinationv1.LeaseList
		if err := c.List(ctx, &leases, client.InNamespace(corev1.NamespaceNodeLease), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list the nodes' Leases: %w", err)
		}
		return kube.LeaseRenewTimes(leases.Items), nil
	}
}

// markedDeadEarly reports whether the planner examines n's pods although
// the API has it Ready: dead on both planes and marked unreachable.
func markedDeadEarly(n *corev1.Node, v liveness.NodeVerdict) bool {
	return unreachable.DeadEarly(n, v) && unreachable.Tainted(n) != nil
}

// currentVerdict is the executor's Verdict: the verdict on node as it
// stands now, from the cached nodes and the same judge the plan read,
// asked without recording anything (RecoveryOptions.Recheck). A node the cache does not hold is Unknown, which refuses.
func (r *RecoveryReconciler) currentVerdict(ctx context.Context, node string) liveness.NodeVerdict {
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return liveness.NodeVerdict{Verdict: liveness.Unknown, Reason: "the nodes cannot be read from the cache: " + err.Error()}
	}
	judge := r.opts.Recheck
	if judge == nil {
		judge = r.opts.Liveness
	}
	return judge(ctx, pointers(nodes.Items), r.clock.Now()).Of(node)
}
