package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// LivenessVerdicts gives the recovery planner its verdicts
// (RecoveryOptions.Liveness): the clocks of the process's one
// liveness.Tracker, which the peering planner shares; the Lease plane of
// leases (nil: none); and, when reports is set (agents report: their BGP
// sessions where peering runs, their gossip where they gossip), the
// agents' PeeringReports from the manager's cache. When the reports
// cannot be read the verdicts rest on the API alone, the safe side: no
// NotReady node counts as alive, and none as dead by the network's word.
func LivenessVerdicts(reports client.Reader, tracker *liveness.Tracker, leases *liveness.LeaseTracker, opts liveness.Options) func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment {
	var metrics verdictMetrics
	return func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment {
		firstSeen := tracker.Observe(kube.LivenessNodes(nodes), now)
		var list v1alpha1.PeeringReportList
		if reports != nil {
			if err := reports.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
				logf.FromContext(ctx).Info("PeeringReports unreadable: verdicts from the API alone this pass", "error", err.Error())
				list.Items = nil
			}
		}
		a := kube.Assess(nodes, list.Items, firstSeen, leases.Leases(), now, opts)
		metrics.observe(a, now)
		return a
	}
}
