package rescue

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
)

// zeroSeconds is a policy with maxUnavailableTime 0 s: rebound acts at the
// NotReady flip.
func zeroSeconds(p *v1alpha1.RecoveryPolicy) { p.Spec.MaxUnavailableTime = &metav1.Duration{} }

// s3Zero is S3 with a 0 s policy, at now: node-3's kubelet stopped at t0
// (its host answers, so no early verdict: Unknown, no liveness verdict at
// all here), the critical Deployment's pod on it; kube-controller-
// manager's NoSchedule taint not on the node yet (taint adds it).
func s3Zero(now time.Time) *world {
	w := newWorld(now)
	for i, n := range []string{"node-0", "node-1", "node-2", "node-3", "node-4"} {
		if i == 3 {
			withoutNoSchedule(w.node(n, "z1", corev1.ConditionUnknown, t0))
			continue
		}
		w.node(n, "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
	}
	w.deploymentPod("coredns", "node-3", 1, 0)
	w.policy("default", zeroSeconds)
	return w
}

// taint puts kube-controller-manager's NoSchedule taint on node-3.
func taint(key string) func(*world) {
	return func(w *world) {
		added := metav1.NewTime(at(100 * time.Millisecond))
		w.s.Nodes[3].Spec.Taints = append(w.s.Nodes[3].Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added})
	}
}

// tolerateAll gives the world's pods the toleration that tolerates every
// taint (operator Exists, no key), common for system pods.
func tolerateAll(w *world) {
	for _, p := range w.s.Pods {
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
}

// landedBack adds the replacement the ReplicaSet created after the first
// delete, which the scheduler bound to node-3 again: created at created
// (zero: no creation time known).
func landedBack(created time.Time) func(*world) {
	return func(w *world) {
		first := w.s.Pods[0]
		terminating(first, at(time.Second))
		p := first.DeepCopy()
		p.Name, p.UID, p.DeletionTimestamp, p.DeletionGracePeriodSeconds = "coredns-5d4f-x2", "uid-pod-coredns-5d4f-x2", nil, nil
		p.CreationTimestamp = metav1.NewTime(created)
		w.s.Pods = append(w.s.Pods, p)
	}
}

// TestOneRescueOneDelete: a replacement must never be able to land where
// the pod was rescued from. Before a delete the node bars the replacement
// (a NoSchedule or NoExecute taint it does not tolerate, or a cordon);
// until then rebound waits; where nothing can bar it, rebound deletes at
// most once per incident, read from the cluster, and then holds.
func TestOneRescueOneDelete(t *testing.T) {
	const x2 = "coredns-5d4f-x2"
	mk := func(now time.Time, mutate ...func(*world)) func() *world {
		return func() *world {
			w := s3Zero(now)
			for _, m := range mutate {
				m(w)
			}
			return w
		}
	}
	waiting := "waiting for node node-3 to be tainted node.kubernetes.io/unreachable:NoSchedule, so that the replacement cannot land back on it"
	tests := []planCase{
		{
			name:      "0 s policy, NotReady flip, no NoSchedule taint yet: no delete",
			world:     mk(at(200 * time.Millisecond)),
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: waiting},
			nextCheck: at(200*time.Millisecond + noTargetRecheck),
		},
		{
			name: "only the NoExecute taint, which the pod tolerates for 300 s: the scheduler would place the replacement there, so no delete",
			world: mk(at(time.Second), func(w *world) {
				w.s.Nodes[3].Spec.Taints = []corev1.Taint{noExecute(corev1.TaintNodeUnreachable, at(100*time.Millisecond))}
			}),
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: waiting},
			nextCheck: at(time.Second + noTargetRecheck),
		},
		{
			name:      "kubelet reports NotReady itself (Ready False): waits for not-ready:NoSchedule",
			world:     mk(at(time.Second), func(w *world) { w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionFalse }),
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "waiting for node node-3 to be tainted node.kubernetes.io/not-ready:NoSchedule"},
			nextCheck: at(time.Second + noTargetRecheck),
		},
		{
			name:      "the taint arrives: delete, and the action carries the taint for the executor",
			world:     mk(at(200*time.Millisecond), taint(corev1.TaintNodeUnreachable)),
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "node node-3 carries taint node.kubernetes.io/unreachable:NoSchedule, which the replacement does not tolerate, so it cannot land back there"},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if k := p.Actions[0].KeepsOff; k == nil || k.Key != corev1.TaintNodeUnreachable || k.Effect != corev1.TaintEffectNoSchedule {
					t.Errorf("KeepsOff = %+v, want unreachable:NoSchedule", k)
				}
			},
		},
		{
			name:      "rebound's own mark bars it too",
			world:     mk(at(200*time.Millisecond), func(w *world) { w.s.Nodes[3].Spec.Taints = []corev1.Taint{unreachableTaint(at(0))} }),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name:      "a cordoned node bars it: delete",
			world:     mk(at(200*time.Millisecond), func(w *world) { w.s.Nodes[3].Spec.Unschedulable = true }),
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "node node-3 carries a cordon (spec.unschedulable)"},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name:      "the pod tolerates every taint: the first pass deletes, once",
			world:     mk(at(200*time.Millisecond), taint(corev1.TaintNodeUnreachable), tolerateAll),
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "no taint can keep the replacement off node node-3 (the pod tolerates every taint): deleted at most once for this incident"},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if p.Actions[0].KeepsOff != nil {
					t.Errorf("KeepsOff = %+v, want none", p.Actions[0].KeepsOff)
				}
			},
		},
		{
			name:      "tolerates every taint, the replacement bound back to the NotReady node: held, no second delete",
			world:     mk(at(1500*time.Millisecond), taint(corev1.TaintNodeUnreachable), tolerateAll, landedBack(at(1200*time.Millisecond))),
			decisions: map[string]Decision{coredns: DecisionInFlight, x2: DecisionHeld},
			reasons: map[string]string{x2: "tolerates every taint that could keep its replacement off node node-3",
				coredns: "waiting for the replacement"},
			nextCheck: at(time.Second + DefaultReplacementTimeout),
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.Held != 1 || !strings.Contains(r.Blocked, "rescues such a pod at most once per incident") {
					t.Errorf("policy report %+v: want the hold in Blocked", r)
				}
			},
		},
		{
			// A restarted controller plans from a fresh snapshot: the
			// record is the cluster's, not the planner's memory.
			name: "restarted planner, the terminating pod gone (force-deleted): the replacement's creation time is the record",
			world: mk(at(2*time.Second), taint(corev1.TaintNodeUnreachable), tolerateAll, landedBack(at(1200*time.Millisecond)), func(w *world) {
				w.s.Pods = w.s.Pods[1:]
			}),
			decisions: map[string]Decision{x2: DecisionHeld},
			reasons:   map[string]string{x2: "the pod itself was created at 2026-03-01T12:00:01Z, after the node's trouble began at 2026-03-01T12:00:00Z, and bound to it"},
		},
		{
			name:      "restarted planner, no creation time on the replacement: the terminating sibling is the record",
			world:     mk(at(2*time.Second), taint(corev1.TaintNodeUnreachable), tolerateAll, landedBack(time.Time{})),
			decisions: map[string]Decision{coredns: DecisionInFlight, x2: DecisionHeld},
			reasons:   map[string]string{x2: "pod coredns-5d4f-x1 of the same ReplicaSet on that node was deleted at 2026-03-01T12:00:01Z"},
			nextCheck: at(time.Second + DefaultReplacementTimeout),
		},
		{
			name:      "tolerates every taint, past the replacement timeout: no scale bounce either",
			world:     mk(at(2*time.Minute), taint(corev1.TaintNodeUnreachable), tolerateAll, landedBack(at(1200*time.Millisecond))),
			decisions: map[string]Decision{coredns: DecisionHeld, x2: DecisionHeld},
			reasons:   map[string]string{coredns: "the pod itself was deleted at 2026-03-01T12:00:01Z"},
		},
		{
			name: "a pod barred by the taint, deleted in an earlier incident's leftovers: a delete still goes ahead",
			world: mk(at(200*time.Millisecond), taint(corev1.TaintNodeUnreachable), func(w *world) {
				w.s.Pods[0].CreationTimestamp = metav1.NewTime(at(100 * time.Millisecond))
			}),
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
	}
	runPlanCases(t, tests)
}
