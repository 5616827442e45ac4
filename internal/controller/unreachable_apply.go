package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"rebound/pkg/rescue"
	"rebound/pkg/unreachable"
)

// Event reasons of the early actions, on the Node (and, for a pod marked
// not ready, on the pod too, as kube-controller-manager records its
// NodeNotReady Event on each pod it marks).
const (
	reasonUnreachableTainted   = "NodeUnreachableTainted"
	reasonUnreachableUntainted = "NodeUnreachableUntainted"
	reasonUnreachableHeld      = "NodeUnreachableHeld"
	reasonUnreachableDryRun    = "NodeUnreachableDryRun"
	reasonUnreachableFailed    = "NodeUnreachableFailed"
	reasonPodsMarkedNotReady   = "PodsMarkedNotReady"
	reasonPodNodeUnreachable   = "NodeUnreachable"
)

// Results as rescue spells them, plus DryRun for an action gated off.
const (
	resultSucceeded   = rescue.ResultSucceeded
	resultAlreadyDone = rescue.ResultAlreadyDone
	resultRefused     = rescue.ResultRefused
	resultFailed      = rescue.ResultFailed
	resultDryRun      = "DryRun"
)

var (
	unreachableNodes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rebound_unreachable_nodes",
		Help: "Nodes carrying rebound's taint rebound.dev/unreachable: dead on both planes (Lease and gossip) while the API may still have them Ready.",
	})
	unreachableHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_unreachable_held_nodes",
		Help: "Nodes dead on both planes that rebound does not mark, by hold: Budget (more than half of the nodes at once) or RateLimited (the marks of the last minute).",
	}, []string{"hold"})
	earlyActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rebound_early_actions_total",
		Help: "What rebound did about nodes dead on both planes, by action (AddTaint, RemoveTaint, MarkPodNotReady) and result (Succeeded, AlreadyDone, Refused, Failed, DryRun).",
	}, []string{"action", "result"})
)

func init() {
	metrics.Registry.MustRegister(unreachableNodes, unreachableHeld, earlyActions)
}

// earlyOutcome is what one write did. tainted: a taint change left
// rebound's taint on the node.
type earlyOutcome struct {
	result, detail string
	err            error
	tainted        bool
}

func (r *UnreachableReconciler) apply(ctx context.Context, a unreachable.Action, now time.Time) earlyOutcome {
	switch a.Kind {
	case unreachable.AddTaint, unreachable.RemoveTaint:
		return r.changeTaint(ctx, a, now)
	case unreachable.MarkPodNotReady:
		return r.markPod(ctx, a, now)
	}
	err := fmt.Errorf("unknown early action %q", a.Kind)
	return earlyOutcome{result: resultFailed, detail: err.Error(), err: err}
}

// changeTaint adds or removes rebound's taint through the one writer
// (unreachable.ChangeTaint: a fresh read, the whole taint list written
// back with the version read, conflicts retried).
func (r *UnreachableReconciler) changeTaint(ctx context.Context, a unreachable.Action, now time.Time) earlyOutcome {
	var add *metav1.Time
	if a.Kind == unreachable.AddTaint {
		t := metav1.NewTime(now.Truncate(time.Second))
		add = &t
	}
	w, err := unreachable.ChangeTaint(ctx, r.api.CoreV1().Nodes(), a.Node, a.NodeUID, add, "")
	switch w {
	case unreachable.TaintWritten:
		return earlyOutcome{result: resultSucceeded, tainted: a.Kind == unreachable.AddTaint}
	case unreachable.TaintAlreadySo:
		return earlyOutcome{result: resultAlreadyDone, detail: "already so", tainted: a.Kind == unreachable.AddTaint}
	case unreachable.TaintNodeGone:
		return earlyOutcome{result: resultAlreadyDone, detail: "node gone"}
	case unreachable.TaintNodeRecreated:
		return earlyOutcome{result: resultAlreadyDone, detail: fmt.Sprintf("node %s was recreated since the plan (planned uid %s); re-planned", a.Node, a.NodeUID)}
	}
	return earlyOutcome{result: resultFailed, detail: err.Error(), err: err, tainted: a.Kind == unreachable.RemoveTaint}
}

// markPod sets the pod's Ready condition False through the status
// subresource, as kube-controller-manager's MarkPodsNotReady does with an
// update: here a strategic merge patch of the one condition (merged by
// type, the others untouched) that carries the resourceVersion the plan
// read, so that a pod whose status changed since (its kubelet is back) is
// not overwritten.
func (r *UnreachableReconciler) markPod(ctx context.Context, a unreachable.Action, now time.Time) earlyOutcome {
	cond := unreachable.NotReadyCondition(a.Node, metav1.NewTime(now))
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": a.ResourceVersion},
		"status":   map[string]any{"conditions": []corev1.PodCondition{cond}},
	})
	if err != nil {
		return failedEarly(err)
	}
	_, err = r.api.CoreV1().Pods(a.Namespace).Patch(ctx, a.Pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case err == nil:
		return earlyOutcome{result: resultSucceeded}
	case apierrors.IsNotFound(err):
		return earlyOutcome{result: resultAlreadyDone, detail: "pod gone"}
	case apierrors.IsConflict(err):
		return earlyOutcome{result: resultAlreadyDone, detail: "the pod changed since it was read; re-planned"}
	default:
		return failedEarly(fmt.Errorf("mark pod %s/%s not ready: %w", a.Namespace, a.Pod, err))
	}
}

func failedEarly(err error) earlyOutcome {
	return earlyOutcome{result: resultFailed, detail: err.Error(), err: err}
}

// nodeEvent records an Event on the node; a failure is logged, never
// fatal to the pass.
func (r *UnreachableReconciler) nodeEvent(ctx context.Context, log logr.Logger, n *corev1.Node, action, eventType, reason, note string) {
	if n == nil {
		return
	}
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}
	if err := r.events.EventAbout(ctx, ref, nil, action, eventType, reason, note); err != nil {
		log.Error(err, "Event not recorded", "node", n.Name, "reason", reason)
	}
}

// podEvent records on a marked pod the Event kube-controller-manager
// records when it marks one, with rebound's reason.
func (r *UnreachableReconciler) podEvent(ctx context.Context, log logr.Logger, a unreachable.Action) {
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: a.Namespace, Name: a.Pod, UID: a.PodUID}
	if err := r.events.EventAbout(ctx, ref, nil, string(a.Kind), corev1.EventTypeWarning, reasonPodNodeUnreachable, a.Reason); err != nil {
		log.Error(err, "Event not recorded", "pod", a.Namespace+"/"+a.Pod, "reason", reasonPodNodeUnreachable)
	}
}
