package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

// peeringSnapshot turns the selected nodes into the planner's input at
// now. It also returns when the next fresh session report of a NotReady
// node goes stale: the plan may change then without any API event, so the
// controller must look again.
func peeringSnapshot(nodes []corev1.Node, selector labels.Selector, now time.Time, maxAge time.Duration) ([]peering.Node, time.Time) {
	var out []peering.Node
	var staleAt time.Time
	notReady := map[string]bool{}
	for i := range nodes {
		n := &nodes[i]
		if !selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		pn := kube.PlannerNode(n, now, maxAge)
		out = append(out, pn)
		if !pn.Ready {
			notReady[pn.Name] = true
		}
	}
	// A report matters while it speaks of a NotReady node: the node's own,
	// or a peer's that names it.
	for i := range nodes {
		n := &nodes[i]
		if !selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		r, ok := kube.Report(n, now, maxAge)
		if !ok {
			continue
		}
		relevant := notReady[n.Name]
		for peer, state := range r.Sessions {
			relevant = relevant || (notReady[peer] && state == "Established")
		}
		if !relevant {
			continue
		}
		at := r.Time.Add(maxAge).Add(time.Millisecond)
		if staleAt.IsZero() || at.Before(staleAt) {
			staleAt = at
		}
	}
	return out, staleAt
}

// peeringRelevantChange filters node updates down to those that can change
// the plan: Ready condition (status or transition time), BGP address,
// membership or opt-out labels, selector labels, and the agents' session
// reports. Heartbeat-only status updates, the bulk of node traffic, pass
// no further.
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
				kube.BGPAddress(o) != kube.BGPAddress(n) ||
				!labels.Equals(o.Labels, n.Labels) ||
				o.Annotations[peering.AnnotationSessions] != n.Annotations[peering.AnnotationSessions]
		},
	}
}
