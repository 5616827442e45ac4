package diagnose

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// UnreachableNode is a node rebound marks, or would mark, dead on both
// planes (pkg/unreachable): its taint rebound.dev/unreachable:NoSchedule,
// the pods marked not ready, and what the plan does about it as diagnose
// sees it.
type UnreachableNode struct {
	Node string `json:"node"`
	// Marked: the node carries rebound's taint; Since is its timeAdded.
	Marked bool       `json:"marked"`
	Since  *time.Time `json:"since,omitempty"`
	// Plan is Keep (marked, still dead), AddTaint, RemoveTaint or Held,
	// by diagnose's verdicts; Hold is Budget or RateLimited when Held.
	Plan   string `json:"plan"`
	Hold   string `json:"hold,omitempty"`
	Reason string `json:"reason"`
	// PodsMarkedNotReady counts the node's pods whose Ready condition
	// rebound set False (reason NodeUnreachable).
	PodsMarkedNotReady int `json:"podsMarkedNotReady"`
}

// unreachable lists every node that carries rebound's taint or that the
// plan would mark or holds, sorted by node. diagnose's verdicts time the
// Lease by the renewTime the kubelet wrote, the controller by its own
// watch; and diagnose has no ledger of the marks removed in the last
// minute, so its rate is the cluster's alone.
func (e *explainer) unreachable() []UnreachableNode {
	plan := unreachable.PlanFor(unreachable.Snapshot{Now: e.now, Nodes: e.s.Nodes, Verdicts: e.s.Verdicts})
	byNode := map[string]*UnreachableNode{}
	entry := func(name string) *UnreachableNode {
		if byNode[name] == nil {
			byNode[name] = &UnreachableNode{Node: name}
		}
		return byNode[name]
	}
	for _, n := range e.s.Nodes {
		if n == nil {
			continue
		}
		if t := unreachable.Tainted(n); t != nil {
			u := entry(n.Name)
			u.Marked, u.Plan = true, "Keep"
			u.Reason = "dead on both planes: " + e.s.Verdicts[n.Name].Reason
			if v, ok := e.s.Verdicts[n.Name]; (!ok || v.Verdict != liveness.Dead) && !kubestatus.NodeReady(n) {
				u.Reason = "NotReady in the API: the mark stays until the node is Ready again, as the record of when its incident began (upstream's own NoSchedule taint keeps new pods off meanwhile)"
			}
			if t.TimeAdded != nil {
				at := t.TimeAdded.UTC()
				u.Since = &at
			}
		}
	}
	for _, a := range plan.Actions {
		u := entry(a.Node)
		u.Plan, u.Reason = string(a.Kind), a.Reason
	}
	for _, h := range plan.Held {
		u := entry(h.Node)
		u.Plan, u.Hold, u.Reason = "Held", string(h.Kind), h.Reason
	}
	for _, p := range e.s.Pods {
		if u := byNode[p.Spec.NodeName]; u != nil && markedByRebound(p) {
			u.PodsMarkedNotReady++
		}
	}
	out := make([]UnreachableNode, 0, len(byNode))
	for _, u := range byNode {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b UnreachableNode) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// markedByRebound: the pod's Ready condition is False with rebound's
// reason.
func markedByRebound(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionFalse && c.Reason == unreachable.PodReasonNodeUnreachable
		}
	}
	return false
}
