package rescue

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
)

// Rows from an independent attack on the removal of rebound's taint.
//
// rebound's taint proves that boot b1 of node-2 is gone (its annotation
// fencing.rebound.dev/fenced-boot-id names it). The taint stays while the
// node is back on a new boot but not Ready, or while an old pod that does
// not tolerate it remains (Fencer.untaint's Holds). The new boot's kubelet
// admits and runs every pod that tolerates the taint (a StatefulSet pod
// with operator Exists or a toleration of out-of-service:NoExecute): such a
// pod is never barred by the taint. If that new boot then falls silent (a
// kubelet crash, a partition), nothing has proven it stopped, yet
// rescue.Fenced still says fenced, and the planner force-deletes the pod
// that runs there: its StatefulSet starts a second copy elsewhere. Upstream
// never force-deletes a pod that is not Terminating.

// staleFence is node-2 fenced by rebound for boot b1 (verified), whose
// status now shows boot bootNow, NotReady, and a StatefulSet pod on it that
// tolerates out-of-service:NoExecute.
func staleFence(bootNow string) *world {
	w := s1(at(time.Minute))
	w.s.Policies[0].Spec.Fencing.Mode = v1alpha1.Watchdog
	taint := outOfService()
	taint.TimeAdded = ptr(metav1.NewTime(at(40 * time.Second)))
	n := w.s.Nodes[2]
	n.Spec.Taints = append(n.Spec.Taints, taint)
	n.Annotations = map[string]string{fencing.AnnotationFencedBoot: "b1", fencing.AnnotationVerified: "node-2-1-x"}
	n.Status.NodeInfo.BootID = bootNow
	p := w.pod("etcd-0", "node-2", "StatefulSet", "etcd")
	p.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeOutOfService, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	return w
}

func forceDeletes(p Plan, pod string) bool {
	for _, a := range p.Actions {
		if a.Kind == ActionForceDelete && a.Pod == pod {
			return true
		}
	}
	return false
}

// TestAttackFenceOfTheFencedBootOnly: the control (the node still shows the
// fenced boot) force-deletes; the attack row (the node shows a new boot)
// must not.
func TestAttackFenceOfTheFencedBootOnly(t *testing.T) {
	if p := PlanFor(staleFence("b1").s); !forceDeletes(p, "etcd-0") {
		t.Fatalf("control: on the fenced boot b1, no force delete of etcd-0: actions %v", p.Actions)
	}
	p := PlanFor(staleFence("b2").s)
	if forceDeletes(p, "etcd-0") {
		for _, c := range p.Critical {
			t.Logf("  %s: %s: %s", c.Name, c.Decision, c.Reason)
		}
		t.Fatalf("attack: node-2 is back on boot b2, which no fence proved stopped, yet etcd-0 (it tolerates the taint, so b2's kubelet may run it) is force-deleted on the fence of boot b1")
	}
}
