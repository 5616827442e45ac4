package rescue

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
)

// Who deleted a pod. A Terminating pod on a NotReady node says nothing of
// it: kube-controller-manager's taint eviction sets its DisruptionTarget
// condition (DeletionByTaintManager) on any pod whose toleration ran out,
// a pod rebound already deleted included, so that condition alone credits
// upstream with rebound's delete. The record that says who deleted is the
// deleter's own: rebound's Events and status.lastActions for rebound; for
// kube-controller-manager, its NoExecute taint and the pod's toleration,
// which must have made the eviction due by the time the deletion was
// requested.

// Deleter names who deleted a pod.
type Deleter string

const (
	// DeletedByRebound: an Event or a status.lastActions record of
	// rebound's names the delete.
	DeletedByRebound Deleter = "rebound"
	// DeletedByTaintEviction: no record of rebound's, and the node's
	// unreachable or not-ready NoExecute taint with the pod's toleration
	// made kube-controller-manager's eviction due by the time the
	// deletion was requested.
	DeletedByTaintEviction Deleter = "TaintEviction"
	// DeletedByPodGC: no record of rebound's; the pod's DisruptionTarget
	// condition names kube-controller-manager's pod garbage collector
	// and its node is fenced (out-of-service) or gone.
	DeletedByPodGC Deleter = "PodGC"
	// DeletedByOther: neither: not rebound by its records (upstream taint
	// eviction, or another actor).
	DeletedByOther Deleter = "NotRebound"
)

// DeleteRecord is rebound's own record of one delete it made: an Event
// with reason StrandedPodDeleted or StrandedPodForceDeleted, or a
// status.lastActions entry of a RecoveryPolicy.
type DeleteRecord struct {
	Namespace, Pod string
	// UID is the pod's UID when the record names it (an Event's related
	// object); "" otherwise (status.lastActions).
	UID types.UID
	// At is when the record was made.
	At time.Time
	// Source names the record for people: "Event StrandedPodDeleted",
	// "RecoveryPolicy default status.lastActions".
	Source string
}

// DeleteRecords reads the deletes rebound recorded in the policies'
// status.lastActions: succeeded, not dry runs.
func DeleteRecords(policies []*v1alpha1.RecoveryPolicy) []DeleteRecord {
	var out []DeleteRecord
	for _, p := range policies {
		if p == nil {
			continue
		}
		for _, a := range p.Status.LastActions {
			if a.DryRun || a.Result != ResultSucceeded || (a.Action != v1alpha1.RecordedDeleteAndReplace && a.Action != v1alpha1.RecordedForceDelete) {
				continue
			}
			ns, name, ok := splitPodRef(a.Pod)
			if !ok {
				continue
			}
			out = append(out, DeleteRecord{Namespace: ns, Pod: name, At: a.Time.Time,
				Source: fmt.Sprintf("RecoveryPolicy %s status.lastActions (%s)", p.Name, a.Action)})
		}
	}
	return out
}

func splitPodRef(ref string) (ns, name string, ok bool) {
	ns, name, ok = strings.Cut(ref, "/")
	return ns, name, ok && ns != "" && name != ""
}

// Deletion says who deleted a Terminating pod and on what evidence.
type Deletion struct {
	By Deleter
	// RequestedAt is when the deletion was asked for: the
	// deletionTimestamp less the grace period.
	RequestedAt time.Time
	// Evidence says why By, in words.
	Evidence string
}

// DeletedBy attributes the deletion of pod, which must be Terminating,
// bound to node (nil when the node is gone). records are rebound's own
// (DeleteRecords, and the Events the caller read); one names this pod
// when its namespace and name match, its UID when it has one, and it was
// made no earlier than the pod's creation (a StatefulSet pod's name
// outlives its incarnations).
func DeletedBy(pod *corev1.Pod, node *corev1.Node, records []DeleteRecord) Deletion {
	d := Deletion{By: DeletedByOther}
	if pod == nil || pod.DeletionTimestamp == nil {
		return d
	}
	d.RequestedAt = deletionRequestedAt(pod)
	created := pod.CreationTimestamp.Time.Truncate(time.Second)
	for _, r := range records {
		if r.Namespace != pod.Namespace || r.Pod != pod.Name || (r.UID != "" && r.UID != pod.UID) || r.At.Before(created) {
			continue
		}
		d.By = DeletedByRebound
		d.Evidence = fmt.Sprintf("%s at %s", r.Source, formatTime(r.At))
		return d
	}
	cond := disruptionReason(pod)
	if ev, ok := taintEvictionDue(pod, node, d.RequestedAt); ok {
		d.By, d.Evidence = DeletedByTaintEviction, ev
		if cond == "DeletionByTaintManager" {
			d.Evidence += "; its DisruptionTarget condition says so too"
		}
		return d
	}
	if cond == "DeletionByPodGC" && (node == nil || fenced(node)) {
		d.By = DeletedByPodGC
		d.Evidence = "its DisruptionTarget condition names kube-controller-manager's pod garbage collector, and its node is fenced or gone"
		return d
	}
	d.Evidence = "no Event of rebound's (the API keeps Events about an hour) nor status.lastActions record (the last 10 per policy) names it"
	switch {
	case cond == "DeletionByTaintManager":
		d.Evidence += "; its DisruptionTarget condition names kube-controller-manager's taint eviction, but no NoExecute taint of its node with the pod's toleration made that due by " +
			formatTime(d.RequestedAt) + " (the condition is also set on a pod already Terminating)"
	case node != nil:
		d.Evidence += "; no NoExecute taint of its node with the pod's toleration made kube-controller-manager's eviction due by " + formatTime(d.RequestedAt)
	}
	return d
}

// taintEvictionDue says whether one of node's unreachable or not-ready
// NoExecute taints, with the pod's toleration of it, made
// kube-controller-manager's eviction due by requested, and how.
func taintEvictionDue(pod *corev1.Pod, node *corev1.Node, requested time.Time) (string, bool) {
	if node == nil {
		return "", false
	}
	var best string
	var bestAt time.Time
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoExecute || (t.Key != corev1.TaintNodeUnreachable && t.Key != corev1.TaintNodeNotReady) || t.TimeAdded == nil {
			continue
		}
		tol, tolerated, forever := tolerationFor(pod, t.Key, t.Value)
		if forever {
			continue
		}
		due := t.TimeAdded.Add(tol)
		if due.After(requested) || (best != "" && !due.Before(bestAt)) {
			continue
		}
		bestAt = due
		how := fmt.Sprintf("the pod tolerates it for %s", tol)
		if !tolerated {
			how = "the pod does not tolerate it"
		}
		best = fmt.Sprintf("node tainted %s:NoExecute at %s and %s, so the eviction was due at %s, the deletion requested at %s",
			t.Key, formatTime(t.TimeAdded.Time), how, formatTime(due), formatTime(requested))
	}
	return best, best != ""
}

func disruptionReason(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

func fenced(node *corev1.Node) bool { return Fenced(node) }
