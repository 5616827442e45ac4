package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
)

// snapshot reads what PlanFor needs from the caches and builds it with
// rescue.Build, as restore bringup and diagnose do, read-only: cached
// objects are shared, not copied (UnsafeDisableDeepCopy), and PlanFor
// never writes to its input. Of the pods it lists only those bound to
// NotReady nodes and the Pending ones, through the node-name index:
// PlanFor examines no other, so a pass copies the NotReady nodes' pods,
// not the cluster's; what the Ready nodes' pods request, which decides
// whether a replacement can run anywhere, comes from the usage index
// (usage.go), with pointers to those pods for host ports and inter-pod
// affinity.
//
// Policies are the exception: their status is patched from them, so they
// are deep copies.
//
// verdictsChange is when the liveness verdicts may change with no new
// event (Assessment.StaleAt); zero when they cannot.
func (r *RecoveryReconciler) snapshot(ctx context.Context, now time.Time) (s rescue.Snapshot, verdictsChange time.Time, err error) {
	var nodes corev1.NodeList
	var namespaces corev1.NamespaceList
	var pvcs corev1.PersistentVolumeClaimList
	var rss appsv1.ReplicaSetList
	var deps appsv1.DeploymentList
	for _, l := range []client.ObjectList{&nodes, &namespaces, &pvcs, &rss, &deps} {
		if err := r.client.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return s, time.Time{}, fmt.Errorf("list %T: %w", l, err)
		}
	}
	var policies v1alpha1.RecoveryPolicyList
	if err := r.client.List(ctx, &policies); err != nil {
		return s, time.Time{}, fmt.Errorf("list %T: %w", &policies, err)
	}
	src := rescue.Sources{
		Now:         now,
		Nodes:       pointers(nodes.Items),
		Namespaces:  make(map[string]map[string]string, len(namespaces.Items)),
		PVCs:        pointers(pvcs.Items),
		ReplicaSets: pointers(rss.Items),
		Deployments: pointers(deps.Items),
		Policies:    pointers(policies.Items),
		ZoneConfig:  r.opts.ZoneConfig,
		Defaults:    r.opts.Defaults,
	}
	for i := range namespaces.Items {
		src.Namespaces[namespaces.Items[i].Name] = namespaces.Items[i].Labels
	}
	r.mu.Lock()
	src.PreviousZones = r.prevZones
	src.PreviousDisruption = r.prevDisruption
	r.mu.Unlock()
	// The Leases' renewTimes before the verdicts: an action carries the
	// renewTime its verdict saw or an older one, never a newer one that
	// would hide a renewal from the executor's re-check.
	if r.opts.LeaseRenewTimes != nil {
		if src.Liveness.LeaseRenewTimes, err = r.opts.LeaseRenewTimes(ctx); err != nil {
			return s, time.Time{}, err
		}
	}
	// One verdict per node (pkg/liveness), judged by the controller's
	// shared judge: rebound's own clocks, the Lease plane and the agents'
	// reports where they run. Without one, no verdicts: the API's
	// transitions alone, as upstream.
	src.Liveness.Assess = func(nodes []*corev1.Node, now time.Time) liveness.Assessment {
		if r.opts.Liveness == nil {
			return liveness.Assessment{}
		}
		return r.opts.Liveness(ctx, nodes, now)
	}
	s, a := rescue.Build(src)
	verdictsChange = a.StaleAt
	// An incident: a node NotReady, or one the API has Ready that is dead
	// on both planes and marked unreachable (whose pods the TwoPlanes
	// policies examine).
	incident := slices.ContainsFunc(s.Nodes, func(n *corev1.Node) bool {
		return !kubestatus.NodeReady(n) || markedDeadEarly(n, s.Verdicts[n.Name])
	})
	// What the Ready nodes' pods request, during an incident only: the
	// target check (pkg/rescue target.go) needs it to tell whether a
	// replacement fits. The usage index keeps it per node from pod events,
	// with the pods themselves (pointers to the cached objects) for host
	// ports and inter-pod affinity; until it has seen every pod, the pods
	// are read node by node.
	usage := incident && r.usage != nil && r.usage.synced()
	if usage {
		ready := make(map[string]bool, len(s.Nodes))
		for _, n := range s.Nodes {
			ready[n.Name] = kubestatus.NodeReady(n)
		}
		s.Usage, s.Pods = r.usage.forNodesWithPods(s.Nodes, func(node string) bool { return ready[node] })
	}
	if incident {
		// The Pending pods take room on some Ready node too.
		var pending corev1.PodList
		if err := r.client.List(ctx, &pending, client.MatchingFields{podNodeIndex: unboundPods}, client.UnsafeDisableDeepCopy); err != nil {
			return s, time.Time{}, fmt.Errorf("list Pending pods: %w", err)
		}
		s.Pods = append(s.Pods, pointers(pending.Items)...)
	}
	for _, n := range s.Nodes {
		if !incident {
			break
		}
		if usage && kubestatus.NodeReady(n) {
			continue
		}
		var pods corev1.PodList
		if err := r.client.List(ctx, &pods, client.MatchingFields{podNodeIndex: n.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return s, time.Time{}, fmt.Errorf("list pods of node %s: %w", n.Name, err)
		}
		s.Pods = append(s.Pods, pointers(pods.Items)...)
	}
	s.RecentActions, s.LedgerSince = r.recentActions(now)
	return s, verdictsChange, nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
