package rescue

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAttackOnceRecord: the "at most once per incident" record of a pod
// that tolerates every taint, under restarts and two replicas on the node.
func TestAttackOnceRecord(t *testing.T) {
	const (
		x1 = "coredns-5d4f-x1"
		y1 = "coredns-5d4f-y1"
	)
	// twoReplicas: the Deployment's two pods both on node-3 (created
	// before the incident), both tolerating every taint.
	twoReplicas := func(w *world) {
		w.s.ReplicaSets[0].Spec.Replicas = ptr(int32(2))
		w.s.Deployments[0].Spec.Replicas = ptr(int32(2))
		p := w.s.Pods[0].DeepCopy()
		p.Name, p.UID = y1, "uid-pod-"+y1
		w.s.Pods = append(w.s.Pods, p)
	}
	mk := func(now time.Time, mutate ...func(*world)) func() *world {
		return func() *world {
			w := s3Zero(now)
			for _, m := range mutate {
				m(w)
			}
			return w
		}
	}
	runPlanCases(t, []planCase{
		{
			name:      "two replicas on the node, both tolerate everything: the first pass deletes both, once each",
			world:     mk(at(200*time.Millisecond), taint(corev1.TaintNodeUnreachable), twoReplicas, tolerateAll),
			decisions: map[string]Decision{x1: DecisionAct, y1: DecisionAct},
			actions:   []string{"Delete kube-system/" + x1, "Delete kube-system/" + y1},
		},
		{
			name: "a pod created long before the incident, never deleted: no record, delete",
			world: mk(at(2*time.Second), taint(corev1.TaintNodeUnreachable), tolerateAll, func(w *world) {
				w.s.Pods[0].CreationTimestamp = metav1.NewTime(at(-time.Hour))
			}),
			decisions: map[string]Decision{x1: DecisionAct},
			actions:   []string{"Delete kube-system/" + x1},
		},
		{
			// The first pass deleted x1; y1's delete failed (a conflict,
			// the executor's re-check refusing on a Lease read error), or
			// a budget allowed one. y1 was never deleted, and nothing of
			// it landed back, yet x1's Terminating copy is taken for
			// y1's rescue: y1 stays on the dead node for the incident.
			name: "two replicas, only x1 deleted (y1's delete failed): y1, never deleted, is rescued",
			world: mk(at(2*time.Second), taint(corev1.TaintNodeUnreachable), twoReplicas, tolerateAll, func(w *world) {
				// Both created before the incident, as the API stamps them.
				for _, p := range w.s.Pods {
					p.CreationTimestamp = metav1.NewTime(at(-time.Hour))
				}
				terminating(w.s.Pods[0], at(time.Second))
			}),
			decisions: map[string]Decision{x1: DecisionInFlight, y1: DecisionAct},
			nextCheck: at(time.Second + DefaultReplacementTimeout),
			actions:   []string{"Delete kube-system/" + y1},
		},
	})
}
