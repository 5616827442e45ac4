package diagnose

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/rescue"
)

// upstreamDeleterReasons are the DisruptionTarget reasons by which the
// planner names an upstream deleter, by the Deleter each stands for.
var upstreamDeleterReasons = map[rescue.Deleter]string{
	rescue.DeletedByTaintEviction: "DeletionByTaintManager",
	rescue.DeletedByPodGC:         "DeletionByPodGC",
}

// attributeDeletions says who deleted every Terminating pod
// (rescue.DeletedBy, from rebound's Events and status.lastActions and the
// node's taints), and hands the planner the pods with the DisruptionTarget
// condition the attribution confirms. kube-controller-manager's taint
// eviction sets that condition on every pod whose toleration runs out, on
// a pod rebound already deleted too, and the planner names its deleter
// from the condition alone: taken as it is, it would credit upstream with
// rebound's delete. The input is not modified: changed pods are copies in
// a new slice.
func (e *explainer) attributeDeletions() {
	e.deletions = map[podKey]rescue.Deletion{}
	nodes := make(map[string]*corev1.Node, len(e.s.Nodes))
	for _, n := range e.s.Nodes {
		if n != nil {
			nodes[n.Name] = n
		}
	}
	records := map[podKey][]rescue.DeleteRecord{}
	for _, r := range append(slices.Clone(e.x.DeleteRecords), rescue.DeleteRecords(e.s.Policies)...) {
		k := podKey{r.Namespace, r.Pod}
		records[k] = append(records[k], r)
	}
	var pods []*corev1.Pod
	for i, p := range e.s.Pods {
		if p == nil || p.DeletionTimestamp == nil {
			continue
		}
		k := podKey{p.Namespace, p.Name}
		d := rescue.DeletedBy(p, nodes[p.Spec.NodeName], records[k])
		e.deletions[k] = d
		fixed, changed := withDeleterCondition(p, d.By)
		if !changed {
			continue
		}
		if pods == nil {
			pods = slices.Clone(e.s.Pods)
		}
		pods[i] = fixed
	}
	if pods != nil {
		e.s.Pods = pods
	}
}

// withDeleterCondition returns pod with the DisruptionTarget condition
// that names by (none for rebound or another actor), and whether that is
// a change (a copy).
func withDeleterCondition(pod *corev1.Pod, by rescue.Deleter) (*corev1.Pod, bool) {
	want := upstreamDeleterReasons[by]
	at := -1
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			at = i
		}
	}
	var have string
	if at >= 0 && pod.Status.Conditions[at].Status == corev1.ConditionTrue {
		have = pod.Status.Conditions[at].Reason
	}
	naming := have == upstreamDeleterReasons[rescue.DeletedByTaintEviction] || have == upstreamDeleterReasons[rescue.DeletedByPodGC]
	switch {
	case want == have, want == "" && !naming:
		return pod, false
	}
	out := pod.DeepCopy()
	if at >= 0 {
		out.Status.Conditions = slices.Delete(out.Status.Conditions, at, at+1)
	}
	if want != "" {
		out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: want})
	}
	return out, true
}

// deletedBy is the report's form of a pod's attribution; nil for a pod
// not Terminating.
func (e *explainer) deletedBy(k podKey) *DeletedBy {
	d, ok := e.deletions[k]
	if !ok {
		return nil
	}
	return &DeletedBy{Actor: string(d.By), RequestedAt: d.RequestedAt.UTC(), Evidence: d.Evidence}
}

// actorWords names a deleter for people.
func actorWords(actor string) string {
	switch rescue.Deleter(actor) {
	case rescue.DeletedByRebound:
		return "rebound"
	case rescue.DeletedByTaintEviction:
		return "kube-controller-manager's taint eviction"
	case rescue.DeletedByPodGC:
		return "kube-controller-manager's pod garbage collector"
	}
	return "not rebound (upstream taint eviction or another actor)"
}

// deletedByText is a deletion's attribution in one clause.
func deletedByText(d *DeletedBy) string {
	return "deleted by " + actorWords(d.Actor) + " (requested at " + stamp(d.RequestedAt) + "; " + d.Evidence + ")"
}
