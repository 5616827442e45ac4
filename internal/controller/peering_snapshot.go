package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

// peeringSnapshot is what one pass plans from.
type peeringSnapshot struct {
	Now time.Time
	// Nodes are every Node in the cache, read-only views rather than
	// copies (see cache.go): at 1,000 nodes and as many reports a deep
	// copy per pass is most of its cost. Nothing writes to them; patches
	// go through fresh objects.
	Nodes []corev1.Node
	// Input is the planner's: the selected nodes, their agents' reports,
	// rebound's first sight of each node's state, the Lease plane, the
	// state and config.
	Input peering.Input
}

// snapshot reads the cluster for one pass: the nodes and the reports from
// the cache, the planner's state (plannerState), and the tracker's first
// sights, updated with what this pass sees.
func (r *PeeringReconciler) snapshot(ctx context.Context, log logr.Logger) (peeringSnapshot, error) {
	now := r.opts.Clock.Now()
	var list corev1.NodeList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return peeringSnapshot{}, fmt.Errorf("list nodes: %w", err)
	}
	var reports v1alpha1.PeeringReportList
	if err := r.client.List(ctx, &reports, client.UnsafeDisableDeepCopy); err != nil {
		return peeringSnapshot{}, fmt.Errorf("list PeeringReports: %w", err)
	}
	nodes, rs, bad := plannedNodesAndReports(list.Items, reports.Items, r.opts.NodeSelector)
	for _, err := range bad {
		log.Info("agent report ignored", "detail", err.Error())
	}
	for _, err := range peering.ValidateNodes(nodes) {
		log.V(1).Info("node cannot be planned normally", "detail", err.Error())
	}
	st, err := r.plannerState(ctx, log, list.Items)
	if err != nil {
		return peeringSnapshot{}, err
	}
	firstSeen := r.opts.Tracker.Observe(livenessNodes(nodes), now)
	// Dead votes are timed by when a pass first saw them, whichever
	// planner's pass it was (the verdicts' pass records them too).
	r.opts.Distrust.SeeReports(rs, now)
	in := peering.Input{Nodes: nodes, Reports: rs, FirstSeen: firstSeen, Leases: r.opts.Leases.Leases(), Distrust: r.opts.Distrust.Distrust(now), State: st, Config: r.opts.Config}
	if r.opts.Liveness != nil {
		all := make([]*corev1.Node, len(list.Items))
		for i := range list.Items {
			all[i] = &list.Items[i]
		}
		a := r.opts.Liveness(ctx, all, now)
		in.Assessment = &a
	}
	return peeringSnapshot{Now: now, Nodes: list.Items, Input: in}, nil
}

// plannedNodesAndReports turns the selected nodes and the agents' reports
// into the planner's input. Reports that cannot be read are returned as errors
// (the caller logs them) and left out; the planner applies the freshness
// and liveness rules to the rest (peering.AliveEvidence).
func plannedNodesAndReports(nodes []corev1.Node, reports []v1alpha1.PeeringReport, selector labels.Selector) ([]peering.Node, []peering.Report, []error) {
	var out []peering.Node
	selected := map[string]bool{}
	for i := range nodes {
		n := &nodes[i]
		if !selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		selected[n.Name] = true
		out = append(out, kube.PlannerNode(n))
	}
	var rs []peering.Report
	var errs []error
	for i := range reports {
		if !selected[reports[i].Name] {
			continue // a node the controller does not plan for, or a report without a node
		}
		r, err := kube.ReportFromAPI(&reports[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rs = append(rs, r)
	}
	return out, rs, errs
}

// peeringRelevantChange filters node updates down to those that can change
// the plan: Ready condition (status or transition time), BGP address and
// port, membership or opt-out labels, selector labels. Heartbeat-only
// status updates, the bulk of node traffic, pass no further.
func peeringRelevantChange() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			or, ot := kube.Ready(o)
			nr, nt := kube.Ready(n)
			return or != nr || !ot.Equal(nt) ||
				kube.BGPAddress(o) != kube.BGPAddress(n) || kube.BGPPort(o) != kube.BGPPort(n) ||
				!labels.Equals(o.Labels, n.Labels)
		},
	}
}

// reportContentChange lets through report updates that say something new,
// or that follow a long silence (half the report max age: the old report
// may have aged out meanwhile). A routine refresh that only moves
// observedAt starts no pass: a report that counts is re-read when it would
// age out (the plan's NextCheck). At 1,000 agents refreshing every minute
// this keeps the controller from planning 1,000 times a minute.
func reportContentChange(maxAge time.Duration) predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.PeeringReport)
			n, ok2 := e.ObjectNew.(*v1alpha1.PeeringReport)
			if !ok1 || !ok2 {
				return true
			}
			ro, errO := kube.ReportFromAPI(o)
			rn, errN := kube.ReportFromAPI(n)
			return errO != nil || errN != nil || !ro.SameContent(rn) || rn.ObservedAt.Sub(ro.ObservedAt) >= maxAge/2
		},
	}
}

// livenessNodes is what the liveness tracker reads of the planned nodes.
func livenessNodes(nodes []peering.Node) []liveness.Node {
	out := make([]liveness.Node, len(nodes))
	for i, n := range nodes {
		out[i] = liveness.Node{Name: n.Name, Ready: n.Ready, Transition: n.LastTransition}
	}
	return out
}
