package restore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/kubestatus"
	"rebound/pkg/rescue"
)

// A restored cluster starts with the status its objects had when the backup
// was taken: Nodes Ready, Deployments Available, although half the nodes
// are gone. Until the node lifecycle controller notices (after its
// --node-monitor-grace-period) nothing in the API says otherwise. So a
// workload counts as available only when its status says so AND the pods
// that status can be counting run on nodes that are Ready with a heartbeat
// (a renewal of the node's Lease) seen during this bring-up. Pods are read only to catch a stale status;
// success always comes from the status (observedGeneration, updated and
// available replicas, the Available condition), never from a pod existing.

// NodeHealth is what Bringup knows of one node.
type NodeHealth struct {
	// Ready is the node's Ready condition in the API.
	Ready bool
	// Heartbeat is true once its Lease's renewTime has been seen to move
	// during this bring-up: the node is alive now, not just Ready in a
	// status restored from a backup. The Ready condition's own heartbeat
	// time does not count: it is restored with the rest of the status.
	Heartbeat bool
}

// Live reports whether pods on the node can count.
func (n NodeHealth) Live() bool { return n.Ready && n.Heartbeat }

func (n NodeHealth) describe(name string) string {
	switch {
	case !n.Ready:
		return name + " (NotReady)"
	case !n.Heartbeat:
		return name + " (Ready in the API, no heartbeat seen yet)"
	default:
		return name
	}
}

// heartbeats tells nodes that are alive now from nodes whose Ready status
// was restored from a backup: a node is confirmed once its heartbeat time
// moves past the first value seen. It compares only the node's own
// timestamps, so clock skew between this machine and the cluster does not
// matter.
type heartbeats struct {
	first     map[string]time.Time
	confirmed map[string]bool
}

func newHeartbeats() *heartbeats {
	return &heartbeats{first: map[string]time.Time{}, confirmed: map[string]bool{}}
}

// observe records a node's latest heartbeat and reports whether the node is
// confirmed alive.
func (h *heartbeats) observe(name string, beat time.Time) bool {
	if h.confirmed[name] {
		return true
	}
	first, seen := h.first[name]
	if !seen {
		h.first[name] = beat
		return false
	}
	if beat.After(first) {
		h.confirmed[name] = true
	}
	return h.confirmed[name]
}

// State is where a workload stands.
type State string

// The workload states.
const (
	StatePending       State = "Pending"
	StateAvailable     State = "Available"
	StateRefusedUnsafe State = "RefusedUnsafe"
)

// WorkloadStatus is one essential workload's state, with the numbers it was
// judged on.
type WorkloadStatus struct {
	Ref   WorkloadRef `json:"workload"`
	State State       `json:"state"`
	// Desired and Available are the status's counts (for a DaemonSet,
	// restricted to Ready nodes).
	Desired   int32 `json:"desired"`
	Available int32 `json:"available"`
	// Live counts Ready pods on nodes that are Ready with a heartbeat.
	Live int32 `json:"live"`
	// Message says what is missing, or why the workload is refused.
	Message string `json:"message"`
	// AvailableAfter is when it was first seen available, since the start
	// of the bring-up, in seconds (0 when not yet).
	AvailableAfter float64 `json:"availableAfterSeconds,omitempty"`
}

func pending(ref WorkloadRef, desired, available, live int32, format string, args ...any) WorkloadStatus {
	return WorkloadStatus{Ref: ref, State: StatePending, Desired: desired, Available: available, Live: live, Message: fmt.Sprintf(format, args...)}
}

// EvaluateDeployment judges a Deployment as `kubectl rollout status` does
// (generation observed, every replica updated, no old replica left, every
// replica available, condition Available), then checks the status against
// the pods it may count. pods are the Deployment's pods (through its
// ReplicaSets); nodes the health of every node.
func EvaluateDeployment(d *appsv1.Deployment, pods []*corev1.Pod, nodes map[string]NodeHealth) WorkloadStatus {
	ref := WorkloadRef{Namespace: d.Namespace, Kind: KindDeployment, Name: d.Name}
	desired := kubestatus.Replicas(d.Spec.Replicas)
	st := d.Status
	live, notLive := livePods(pods, nodes)
	switch {
	case d.Generation > st.ObservedGeneration:
		return pending(ref, desired, st.AvailableReplicas, live, "waiting for the Deployment controller to observe generation %d (status is of %d)", d.Generation, st.ObservedGeneration)
	case desired == 0 && d.Annotations[rescue.ScaleBounceAnnotation] != "":
		return pending(ref, desired, st.AvailableReplicas, live, "scale bounce under way: 0 replicas, %s to restore (annotation %s)",
			d.Annotations[rescue.ScaleBounceAnnotation], rescue.ScaleBounceAnnotation)
	case st.UpdatedReplicas < desired:
		return pending(ref, desired, st.AvailableReplicas, live, "%d of %d replicas updated", st.UpdatedReplicas, desired)
	case st.Replicas > st.UpdatedReplicas:
		return pending(ref, desired, st.AvailableReplicas, live, "%d old replicas pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < desired:
		return pending(ref, desired, st.AvailableReplicas, live, "%d of %d replicas available%s", st.AvailableReplicas, desired, where(notLive))
	case desired > 0 && !kubestatus.DeploymentAvailable(d):
		return pending(ref, desired, st.AvailableReplicas, live, "condition Available is not True%s", where(notLive))
	case live < desired:
		return pending(ref, desired, st.AvailableReplicas, live, "status says %d of %d available but only %d Ready pods run on live nodes%s: the status may date from before the restore",
			st.AvailableReplicas, desired, live, where(notLive))
	}
	ok := WorkloadStatus{Ref: ref, State: StateAvailable, Desired: desired, Available: st.AvailableReplicas, Live: live,
		Message: fmt.Sprintf("%d of %d replicas available", st.AvailableReplicas, desired)}
	if desired == 0 {
		ok.Message = "scaled to 0 replicas: nothing to run"
	}
	return ok
}

// EvaluateDaemonSet judges a DaemonSet on the Ready nodes only: its pods on
// NotReady nodes are never moved (they belong to their node), so they are
// taken out of the desired count. A node hosting one of its pods that is
// Ready in the API without a heartbeat yet keeps it pending: that node may
// be dead.
func EvaluateDaemonSet(ds *appsv1.DaemonSet, pods []*corev1.Pod, nodes map[string]NodeHealth) WorkloadStatus {
	ref := WorkloadRef{Namespace: ds.Namespace, Kind: KindDaemonSet, Name: ds.Name}
	st := ds.Status
	live, notLive := livePods(pods, nodes)
	var down, unknown []string
	seen := map[string]bool{}
	for _, p := range pods {
		n := p.Spec.NodeName
		if n == "" || p.DeletionTimestamp != nil || seen[n] {
			continue
		}
		seen[n] = true
		switch h := nodes[n]; {
		case !h.Ready:
			down = append(down, n)
		case !h.Heartbeat:
			unknown = append(unknown, n)
		}
	}
	slices.Sort(down)
	slices.Sort(unknown)
	desired := max(st.DesiredNumberScheduled-int32(len(down)), 0)
	switch {
	case ds.Generation > st.ObservedGeneration:
		return pending(ref, desired, st.NumberAvailable, live, "waiting for the DaemonSet controller to observe generation %d (status is of %d)", ds.Generation, st.ObservedGeneration)
	case len(unknown) > 0:
		return pending(ref, desired, st.NumberAvailable, live, "waiting for a heartbeat from %s to know whether its pod counts", strings.Join(unknown, ", "))
	case st.UpdatedNumberScheduled < desired:
		return pending(ref, desired, st.NumberAvailable, live, "%d of %d pods on Ready nodes updated", st.UpdatedNumberScheduled, desired)
	case st.NumberAvailable < desired:
		return pending(ref, desired, st.NumberAvailable, live, "%d of %d pods on Ready nodes available", st.NumberAvailable, desired)
	case live < desired:
		return pending(ref, desired, st.NumberAvailable, live, "status says %d available but only %d Ready pods run on live nodes%s: the status may date from before the restore",
			st.NumberAvailable, live, where(notLive))
	}
	msg := fmt.Sprintf("%d of %d pods on Ready nodes available", min(st.NumberAvailable, desired), desired)
	if len(down) > 0 {
		msg += fmt.Sprintf("; its pods on NotReady %s stay there (DaemonSet pods are never moved)", strings.Join(down, ", "))
	}
	return WorkloadStatus{Ref: ref, State: StateAvailable, Desired: desired, Available: min(st.NumberAvailable, desired), Live: live, Message: msg}
}

// EvaluateStatefulSet judges a StatefulSet by its ready replicas.
func EvaluateStatefulSet(sts *appsv1.StatefulSet, pods []*corev1.Pod, nodes map[string]NodeHealth) WorkloadStatus {
	ref := WorkloadRef{Namespace: sts.Namespace, Kind: KindStatefulSet, Name: sts.Name}
	desired := kubestatus.Replicas(sts.Spec.Replicas)
	st := sts.Status
	live, notLive := livePods(pods, nodes)
	switch {
	case sts.Generation > st.ObservedGeneration:
		return pending(ref, desired, st.ReadyReplicas, live, "waiting for the StatefulSet controller to observe generation %d (status is of %d)", sts.Generation, st.ObservedGeneration)
	case st.ReadyReplicas < desired:
		return pending(ref, desired, st.ReadyReplicas, live, "%d of %d replicas ready%s", st.ReadyReplicas, desired, where(notLive))
	case live < desired:
		return pending(ref, desired, st.ReadyReplicas, live, "status says %d of %d ready but only %d Ready pods run on live nodes%s: the status may date from before the restore",
			st.ReadyReplicas, desired, live, where(notLive))
	}
	return WorkloadStatus{Ref: ref, State: StateAvailable, Desired: desired, Available: st.ReadyReplicas, Live: live,
		Message: fmt.Sprintf("%d of %d replicas ready", st.ReadyReplicas, desired)}
}

// refuseUnsafe turns a workload that is not available into
// StateRefusedUnsafe when the plan will not move one of its pods without
// fencing. critical are the plan's pods of this workload.
func refuseUnsafe(ws WorkloadStatus, critical []rescue.CriticalPod) WorkloadStatus {
	if ws.State == StateAvailable {
		return ws
	}
	for _, cp := range critical {
		if cp.Decision == rescue.DecisionWaitingForFencing ||
			(cp.Decision == rescue.DecisionReportOnly && cp.Workload.Class == rescue.ClassStateful) {
			ws.State = StateRefusedUnsafe
			ws.Message = fmt.Sprintf("pod %s on NotReady node %s: %s", cp.Name, cp.Node, cp.Reason)
			return ws
		}
	}
	return ws
}

// livePods counts the Ready, running, non-terminating pods on live nodes,
// and describes where the others are.
func livePods(pods []*corev1.Pod, nodes map[string]NodeHealth) (int32, []string) {
	var live int32
	var others []string
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		switch h, ok := nodes[p.Spec.NodeName]; {
		case p.Spec.NodeName == "":
			others = append(others, p.Name+" not scheduled")
		case !ok:
			others = append(others, p.Name+" on unknown node "+p.Spec.NodeName)
		case !h.Live():
			others = append(others, p.Name+" on "+h.describe(p.Spec.NodeName))
		case !kubestatus.PodRunningReady(p):
			others = append(others, p.Name+" on "+p.Spec.NodeName+" not Ready")
		default:
			live++
		}
	}
	slices.Sort(others)
	return live, others
}

func where(notLive []string) string {
	if len(notLive) == 0 {
		return ""
	}
	const maxShown = 3
	if len(notLive) > maxShown {
		return fmt.Sprintf(" (pods %s and %d more)", strings.Join(notLive[:maxShown], "; "), len(notLive)-maxShown)
	}
	return " (pod " + strings.Join(notLive, "; ") + ")"
}

// replicas is kubestatus.Replicas under the name apply.go uses; apply.go
// is being merged into the shared executor, which reads kubestatus itself.
func replicas(p *int32) int32 { return kubestatus.Replicas(p) }
