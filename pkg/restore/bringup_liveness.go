package restore

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
	"rebound/pkg/rescue"
)

// readReports lists the agents' PeeringReports, the second signal of
// pkg/liveness: a node NotReady in the API with a live BGP session
// reported by a fresh Ready observer is cut off, not dead, and its
// stateful pods never move, in a restore as in the controller. Without the
// CRD, the right to list it or a dynamic client, there are none: the
// verdicts come from the Ready conditions and the Leases. A report that
// cannot be read is left out, as the controller leaves it out.
func readReports(ctx context.Context, client dynamic.Interface) ([]liveness.Report, error) {
	if client == nil {
		return nil, nil
	}
	reports, _, err := kube.ListReports(ctx, client, 0)
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list PeeringReports: %w", err)
	}
	return reports, nil
}

// livenessSignals gives the planner the signals the controller gives it: the
// Ready conditions timed by the bring-up's own first sight, the Lease
// plane on its own clock, and the agents' reports.
func (b *bringup) livenessSignals(s *clusterState, now time.Time) rescue.LivenessSignals {
	for node, renew := range s.heartbeat {
		b.leasePlane.Observe(node, renew, s.leaseDuration[node], now)
	}
	return rescue.LivenessSignals{
		Reports:         s.reports,
		Leases:          b.leasePlane.Leases(),
		LeaseRenewTimes: s.heartbeat,
		FirstSeen:       b.firstSeen.Observe(kube.LivenessNodes(s.nodes), now),
		Options:         b.opts.Evidence,
	}
}
