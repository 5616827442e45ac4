package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"rebound/api/v1alpha1"
	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

// BGPAliveFromReports gives the recovery planner its second liveness signal
// (RecoveryOptions.BGPAlive): the agents' PeeringReports, read from the
// manager's cache (the peering reconciler watches them already), turned
// into evidence by the same pure function the peering planner uses. When
// the reports cannot be read it returns nil, which is the safe side: no
// NotReady node counts as alive, so nothing extra is held back or allowed.
func BGPAliveFromReports(c client.Reader, opts peering.EvidenceOptions) func(ctx context.Context, nodes []*corev1.Node, now time.Time) map[string]string {
	return func(ctx context.Context, nodes []*corev1.Node, now time.Time) map[string]string {
		var reports v1alpha1.PeeringReportList
		if err := c.List(ctx, &reports); err != nil {
			logf.FromContext(ctx).Info("PeeringReports unreadable: no BGP liveness evidence this pass", "error", err.Error())
			return nil
		}
		return kube.BGPAlive(nodes, reports.Items, now, opts)
	}
}
