package rescue

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
)

// Results of an action, as status.lastActions[].result, Events, metrics
// and `restore bringup` spell them (the API documents "Succeeded").
const (
	// ResultSucceeded: the action changed the cluster.
	ResultSucceeded = "Succeeded"
	// ResultAlreadyDone: the object was gone or had changed since the plan
	// (UID or resourceVersion precondition): someone, maybe an earlier
	// run of rebound, got there first. Not an error, not repeated; the next
	// plan decides afresh.
	ResultAlreadyDone = "AlreadyDone"
	// ResultRefused: a safety precondition, checked again on the object
	// re-read from the API just before the write, no longer holds (the
	// node lost its out-of-service taint, the Deployment has a replica
	// available again or was already bounced for this incident).
	ResultRefused = "Refused"
	// ResultFailed: the API refused for another reason.
	ResultFailed = "Failed"
)

// LastActionsCapacity is the API's maxItems for status.lastActions.
const LastActionsCapacity = 10

// recordReasonMax is the API's maxLength for a record's reason.
const recordReasonMax = 1024

// Record returns the status.lastActions entry for the action, taken at now
// with the given result. Both halves of a scale bounce are recorded as
// ScaleBounce with the pod they are for.
func (a *Action) Record(now time.Time, result string) v1alpha1.ActionRecord {
	kind := v1alpha1.RecordedDeleteAndReplace
	switch a.Kind {
	case ActionForceDelete:
		kind = v1alpha1.RecordedForceDelete
	case ActionScaleDown, ActionScaleRestore:
		kind = v1alpha1.RecordedScaleBounce
	}
	return v1alpha1.ActionRecord{
		Time: metav1.NewTime(now), Action: kind, Pod: a.PodRef(), Node: a.Node,
		Reason: Truncate(a.Reason, recordReasonMax), DryRun: a.DryRun, Result: result,
	}
}

// PrependRecords puts records (oldest first) in front of a status's
// lastActions, newest first, and keeps LastActionsCapacity of them.
func PrependRecords(last []v1alpha1.ActionRecord, records ...v1alpha1.ActionRecord) []v1alpha1.ActionRecord {
	merged := make([]v1alpha1.ActionRecord, 0, len(records)+len(last))
	for i := len(records) - 1; i >= 0; i-- {
		merged = append(merged, records[i])
	}
	merged = append(merged, last...)
	return merged[:min(len(merged), LastActionsCapacity)]
}

// Truncate cuts s to at most n bytes, ending in "..." when it cut, and never
// inside a UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 3 {
		return s[:n]
	}
	cut := n - 3
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "..."
}

// ChangeDeployment checks a scale action's preconditions on d, which the
// executor has just re-read from the API (not from a cache), and on success
// changes d as the action says, for one Update: annotation and
// spec.replicas together, which is what makes a bounce interrupted between
// its halves finish on the next plan. result is "" when d was changed and
// must be written, else ResultAlreadyDone or ResultRefused with why.
func (a *Action) ChangeDeployment(d *appsv1.Deployment) (result, why string) {
	switch {
	case a.UID != "" && d.UID != a.UID:
		return ResultAlreadyDone, "the Deployment was recreated since the plan (UID differs); re-planned"
	case a.ResourceVersion != "" && d.ResourceVersion != a.ResourceVersion:
		return ResultAlreadyDone, "the Deployment changed since the plan (resourceVersion differs); re-planned"
	}
	switch a.Kind {
	case ActionScaleDown:
		if w, covered := BounceCovers(d.Annotations, a.Incident, a.IncidentSlack); covered {
			return ResultRefused, w
		}
		if n := d.Status.AvailableReplicas; n > 0 {
			return ResultRefused, fmt.Sprintf("the Deployment has %d replica(s) available now: no scale bounce", n)
		}
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[ScaleBounceAnnotation] = strconv.Itoa(int(a.Replicas))
		d.Annotations[ScaleBouncedForAnnotation] = formatTime(a.Incident)
		d.Spec.Replicas = &[]int32{0}[0]
	case ActionScaleRestore:
		if _, ok := d.Annotations[ScaleBounceAnnotation]; !ok || desiredReplicas(d.Spec.Replicas) != 0 {
			return ResultAlreadyDone, "already restored"
		}
		delete(d.Annotations, ScaleBounceAnnotation)
		d.Spec.Replicas = &[]int32{a.Replicas}[0]
	default:
		return ResultFailed, fmt.Sprintf("%s is not a Deployment action", a.Kind)
	}
	return "", ""
}
