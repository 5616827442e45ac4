package restore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
	"rebound/pkg/rescue"
)

// peeringReports is the PeeringReport resource the agents write.
var peeringReports = schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "peeringreports"}

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
	l, err := client.Resource(peeringReports).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list PeeringReports: %w", err)
	}
	var out []liveness.Report
	for i := range l.Items {
		var obj v1alpha1.PeeringReport
		data, err := json.Marshal(l.Items[i].Object)
		if err == nil {
			err = json.Unmarshal(data, &obj)
		}
		if err != nil {
			continue
		}
		if r, err := kube.ReportFromAPI(&obj); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
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
