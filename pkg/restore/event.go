package restore

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rebound/pkg/rescue"
)

// reportingController names `rebound restore bringup` in the Events it
// records, one for every action it takes (the controller records the same
// reasons as rebound-controller).
const reportingController = "rebound.dev/restore-bringup"

// recordEvent records an Event about an action, regarding the workload
// whose fate it decides, related to the pod. Events are best effort: the
// progress line stays the record if the Event cannot be written.
func recordEvent(ctx context.Context, client kubernetes.Interface, now time.Time, a rescue.Action, regarding corev1.ObjectReference, failed bool, note string) error {
	eventType, reason := corev1.EventTypeNormal, a.Kind.EventReason()
	if failed {
		eventType, reason = corev1.EventTypeWarning, "RescueFailed"
	}
	var related *corev1.ObjectReference
	if a.Pod != "" && (a.Kind == rescue.ActionDelete || a.Kind == rescue.ActionForceDelete) {
		related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: a.Namespace, Name: a.Pod, UID: a.UID}
	}
	if len(note) > 1000 {
		note = note[:997] + "..."
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	ev := &eventsv1.Event{
		// Named as client-go's recorder names Events: object name, dot,
		// the time in hex.
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", regarding.Name, now.UnixNano()), Namespace: a.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: reportingController,
		ReportingInstance:   truncate(reportingController+"-"+host, 128),
		Action:              string(a.Kind),
		Reason:              reason,
		Regarding:           regarding,
		Related:             related,
		Note:                note,
		Type:                eventType,
	}
	_, err := client.EventsV1().Events(a.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// regardingFor is the object an action's Event is about: the essential
// workload that owns the pod, or the Deployment scaled.
func regardingFor(a rescue.Action, s *clusterState) corev1.ObjectReference {
	if a.Kind == rescue.ActionScaleDown || a.Kind == rescue.ActionScaleRestore {
		return corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: a.Namespace, Name: a.Name, UID: a.UID}
	}
	for r, obj := range s.workloads {
		for _, p := range s.podsOf(r) {
			if p.Namespace == a.Namespace && p.Name == a.Pod {
				return corev1.ObjectReference{APIVersion: "apps/v1", Kind: string(r.Kind), Namespace: r.Namespace, Name: r.Name, UID: obj.uid()}
			}
		}
	}
	return corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: a.Namespace, Name: a.Pod, UID: a.UID}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
