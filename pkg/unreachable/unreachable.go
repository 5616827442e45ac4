// Package unreachable decides what rebound does about a node that is dead
// on both planes (pkg/liveness: its Lease not renewed on rebound's clock
// and a quorum of its gossip watchers say dead) while the API still has it
// Ready, because kube-controller-manager's node grace period (50 s by
// default) has not run out:
//
//  1. taint it rebound.dev/unreachable:NoSchedule, so that no replacement
//     is scheduled onto it;
//  2. optionally mark its pods not ready, as kube-controller-manager does
//     once the node is NotReady (MarkPodsNotReady in k8s.io/kubernetes
//     pkg/controller/util/node), so that EndpointSlices stop sending it
//     traffic;
//
// and, the moment the verdict is no longer Dead on a node the API has
// Ready, takes its taint off again. A RecoveryPolicy with spec.detection
// TwoPlanes then counts its pods as stranded from the detection
// (pkg/rescue); the taint is the budgeted, persisted record of the
// verdict that pkg/rescue and its executor require, and, once the API has
// the node NotReady, the record of when its incident began (the key of
// pkg/rescue's one scale bounce per incident), which survives a restart
// of the controller and a verdict that changes.
//
// PlanFor is pure: no client, no logger, no clock. Its rules, each with
// the reason it gives:
//
//	situation                                            action
//	rebound's taint, API NotReady                        keep it, whatever the verdict (none
//	                                                     at all included): upstream's own
//	                                                     not-ready/unreachable NoSchedule taint
//	                                                     already keeps new pods off, and the
//	                                                     mark dates the incident
//	rebound's taint, API Ready, verdict not Dead (or     RemoveTaint, never limited, never gated
//	  none at all)                                       (dry run, stop switch): fail open
//	rebound's taint, Dead                                keep it; MarkPodNotReady for each pod
//	                                                     still Ready while the API has the
//	                                                     node Ready (with MarkPodsNotReady)
//	no taint, Dead on both planes, API Ready (Early)     AddTaint, within the budget:
//	  more nodes out at once than MaxShare of all        Held (Budget): none is marked; so many
//	  (NotReady in the API and marked counted            nodes down at once say something
//	  together, each node once)                          global is wrong (control plane, Lease
//	                                                     writes, the gossip network)
//	  MarksPerMinute marks made in the last minute       Held (RateLimited) until a mark ages out
//	no taint, Dead but NotReady in the API               none: upstream taints it and marks its
//	                                                     pods itself
//	anyone else's taint                                  never touched
//
// The budget counts from the cluster, not from memory: the nodes NotReady
// and those that carry the taint now, and the taints' timeAdded for the
// rate, so a restarted controller neither forgets its marks nor repeats
// them; the caller's ledger (Snapshot.Recent) adds the marks whose taint
// has been removed since.
//
// When no controller runs, the node's own agent takes the taint off once
// the node is Ready and its Lease renews (internal/agent, Untainter), and
// `rebound untaint` takes every one off at uninstall.
package unreachable

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
)

// TaintKey is the key of rebound's taint on a node dead on both planes.
// It is only ever added with effect NoSchedule: it keeps replacements off
// the node, and evicts nothing (kube-controller-manager's own NoExecute
// taints do that once the node is NotReady).
const TaintKey = "rebound.dev/unreachable"

// IsTaint reports whether t is rebound's taint. A taint with rebound's key
// and another effect is someone else's: Plan never removes it.
func IsTaint(t *corev1.Taint) bool {
	return t.Key == TaintKey && t.Effect == corev1.TaintEffectNoSchedule
}

// Tainted returns rebound's taint on n, or nil.
func Tainted(n *corev1.Node) *corev1.Taint {
	for i := range n.Spec.Taints {
		if IsTaint(&n.Spec.Taints[i]) {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// WithTaint returns taints plus rebound's taint added at added, or
// taints unchanged (and false) when it is already there. The input is
// not modified.
func WithTaint(taints []corev1.Taint, added metav1.Time) ([]corev1.Taint, bool) {
	if slices.ContainsFunc(taints, func(t corev1.Taint) bool { return IsTaint(&t) }) {
		return taints, false
	}
	out := slices.Clone(taints)
	return append(out, corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}), true
}

// WithoutTaint returns taints without rebound's taint, every other taint
// in its order, or taints unchanged (and false) when it is not there.
func WithoutTaint(taints []corev1.Taint) ([]corev1.Taint, bool) {
	out := slices.DeleteFunc(slices.Clone(taints), func(t corev1.Taint) bool { return IsTaint(&t) })
	if len(out) == len(taints) {
		return taints, false
	}
	return out, true
}

// DeadEarly reports whether n is dead on both planes while the API has it
// Ready, with no evidence of life (liveness.Rules): a node PlanFor marks,
// and, for any policy, no target for a replacement.
func DeadEarly(n *corev1.Node, v liveness.NodeVerdict) bool {
	return v.DeadEarly() && kubestatus.NodeReady(n)
}

// PodReasonNodeUnreachable is the reason rebound writes on the Ready
// condition of a pod it marks not ready.
const PodReasonNodeUnreachable = "NodeUnreachable"

// NeedsMark reports whether pod on node is one kube-controller-manager's
// MarkPodsNotReady would change: bound to that node, with a Ready
// condition that is not False. Like upstream it skips a pod without a
// Ready condition (nothing to turn off: the kubelet never reported one)
// and a pod already not ready, and it skips no other: DaemonSet, static
// and terminating pods serve traffic from the node as long as they are
// Ready.
func NeedsMark(pod *corev1.Pod, node string) bool {
	if pod.Spec.NodeName != node {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status != corev1.ConditionFalse
		}
	}
	return false
}

// NotReadyCondition is the Ready condition rebound writes on a pod of a
// node dead on both planes: False since now, with a reason and a message
// that say who set it and when it turns back. Upstream sets only the
// status and the transition time and keeps the kubelet's reason; rebound
// sets its own, so that a pod marked before the API noticed the node can
// be told apart.
func NotReadyCondition(node string, now metav1.Time) corev1.PodCondition {
	return corev1.PodCondition{
		Type:               corev1.PodReady,
		Status:             corev1.ConditionFalse,
		LastTransitionTime: now,
		Reason:             PodReasonNodeUnreachable,
		Message: fmt.Sprintf("rebound: node %s is dead on both planes (Lease not renewed, its gossip watchers agree) though the API still has it Ready; "+
			"its kubelet sets Ready again on its next status sync if it is alive", node),
	}
}
