package rescue

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// Detection TwoPlanes: a node the API still has Ready, dead on both
// planes (detected at t0) and marked rebound.dev/unreachable 1 s later.

// renewed is node-3's Lease renewTime as the kubelet last wrote it (its
// own clock: only ever compared).
var renewed = time.Date(2026, 3, 1, 11, 59, 40, 0, time.UTC)

func twoPlanes(p *v1alpha1.RecoveryPolicy) {
	p.Spec.Detection = v1alpha1.DetectionTwoPlanes
	p.Spec.MaxUnavailableTime = &metav1.Duration{Duration: 5 * time.Second}
}

func unreachableTaint(added time.Time) corev1.Taint {
	a := metav1.NewTime(added)
	return corev1.Taint{Key: unreachable.TaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &a}
}

// s13 is S13: 5 Ready nodes, node-3 dead on both planes since t0 and
// marked at t0+1s, the critical Deployment's pod on it, and a policy
// mutated by mutate (TwoPlanes, 5 s, by default).
func s13(now time.Time, mutate ...func(*v1alpha1.RecoveryPolicy)) *world {
	w := newWorld(now)
	for _, n := range []string{"node-0", "node-1", "node-2", "node-3", "node-4"} {
		var taints []corev1.Taint
		if n == "node-3" {
			taints = append(taints, unreachableTaint(at(time.Second)))
		}
		w.node(n, "z1", corev1.ConditionTrue, t0.Add(-time.Hour), taints...)
	}
	w.deploymentPod("coredns", "node-3", 1, 0)
	if len(mutate) == 0 {
		mutate = append(mutate, twoPlanes)
	}
	w.policy("default", mutate...)
	w.s.Verdicts = map[string]liveness.NodeVerdict{"node-3": {Verdict: liveness.Dead, Early: true, DetectedAt: t0, Since: t0.Add(-time.Hour),
		Reason: "Ready in the API, but dead on both planes"}}
	w.s.LeaseRenewTimes = map[string]time.Time{"node-3": renewed}
	return w
}

func TestTwoPlanes(t *testing.T) {
	tests := []planCase{
		{
			name:      "past DetectedAt + maxUnavailableTime: delete, carrying what the executor checks",
			world:     func() *world { return s13(at(6 * time.Second)) },
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "node node-3 dead on both planes for 6s (detected at 2026-03-01T12:00:00Z on rebound's clock, marked rebound.dev/unreachable) >= maxUnavailableTime 5s, upstream eviction not before the API has the node NotReady"},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				tp := p.Actions[0].TwoPlane
				if tp == nil || !tp.LeaseRenewTime.Equal(renewed) || !tp.DetectedAt.Equal(t0) || !tp.MarkedAt.Equal(at(time.Second)) {
					t.Fatalf("TwoPlane = %+v", tp)
				}
				if strings.Contains(p.Actions[0].Reason, "Ready node node-3") {
					t.Errorf("the dead node is its own target: %s", p.Actions[0].Reason)
				}
				if c := p.Critical[0]; !c.NotReadySince.IsZero() || !c.DetectedAt.Equal(t0) || !c.Incident.Equal(at(time.Second)) {
					t.Errorf("critical pod = %+v", c)
				}
			},
		},
		{
			name:      "before the deadline: not yet, looked at again then",
			world:     func() *world { return s13(at(2 * time.Second)) },
			decisions: map[string]Decision{coredns: DecisionNotYet},
			reasons:   map[string]string{coredns: "node node-3 dead on both planes for 2s of maxUnavailableTime 5s: stranded at 2026-03-01T12:00:05Z if still dead"},
			nextCheck: at(5 * time.Second),
		},
		{
			name: "a NotReady policy: a Ready node's pods are not examined",
			world: func() *world {
				return s13(at(time.Minute), func(p *v1alpha1.RecoveryPolicy) { p.Spec.Detection = v1alpha1.DetectionNotReady })
			},
			decisions: map[string]Decision{},
		},
		{
			name: "not marked (the budget held it): not examined",
			world: func() *world {
				w := s13(at(time.Minute))
				w.s.Nodes[3].Spec.Taints = nil
				return w
			},
			decisions: map[string]Decision{},
		},
		{
			name: "someone else's NoExecute taint under rebound's key is no mark",
			world: func() *world {
				w := s13(at(time.Minute))
				w.s.Nodes[3].Spec.Taints = []corev1.Taint{{Key: unreachable.TaintKey, Effect: corev1.TaintEffectNoExecute}}
				return w
			},
			decisions: map[string]Decision{},
		},
		{
			name: "no Lease renewTime to compare: not examined",
			world: func() *world {
				w := s13(at(time.Minute))
				w.s.LeaseRenewTimes = nil
				return w
			},
			decisions: map[string]Decision{},
		},
		{
			name: "verdict no longer Dead (its Lease renewed): not examined",
			world: func() *world {
				w := s13(at(time.Minute))
				w.s.Verdicts["node-3"] = liveness.NodeVerdict{Verdict: liveness.Alive}
				return w
			},
			decisions: map[string]Decision{},
		},
		{
			name: "a StatefulSet pod still needs fencing",
			world: func() *world {
				w := s13(at(time.Minute))
				w.pod("etcd-0", "node-3", "StatefulSet", "etcd")
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionWaitingForFencing},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "fenced: force delete, with the two-plane check",
			world: func() *world {
				w := s13(at(time.Minute))
				w.pod("etcd-0", "node-3", "StatefulSet", "etcd")
				w.s.Nodes[3].Spec.Taints = append(w.s.Nodes[3].Spec.Taints, outOfService())
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "etcd-0": DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns, "ForceDelete kube-system/etcd-0"},
			check: func(t *testing.T, p Plan) {
				for _, a := range p.Actions {
					if a.TwoPlane == nil {
						t.Errorf("%s carries no two-plane check", a.Key())
					}
				}
			},
		},
		{
			name: "NotReady now, marked earlier: the TwoPlanes clock still counts from the detection, the incident from the mark",
			world: func() *world {
				w := s13(at(20 * time.Second))
				w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionUnknown
				w.s.Nodes[3].Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(15 * time.Second))
				w.s.Verdicts["node-3"] = liveness.NodeVerdict{Verdict: liveness.Dead, DetectedAt: t0, Since: at(15 * time.Second), Reason: "NotReady, and gossip agrees"}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if p.Actions[0].TwoPlane == nil || !p.Critical[0].Incident.Equal(at(time.Second)) || !p.Critical[0].Deadline.Equal(at(5*time.Second)) {
					t.Errorf("action %+v, critical %+v", p.Actions[0], p.Critical[0])
				}
			},
		},
		{
			name: "NotReady now, a NotReady policy: its own clock, no two-plane check, the incident still from the mark",
			world: func() *world {
				w := s13(at(20*time.Second), func(p *v1alpha1.RecoveryPolicy) {
					p.Spec.MaxUnavailableTime = &metav1.Duration{Duration: 5 * time.Second}
				})
				w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionUnknown
				w.s.Nodes[3].Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(15 * time.Second))
				w.s.Verdicts["node-3"] = liveness.NodeVerdict{Verdict: liveness.Dead, DetectedAt: t0, Since: at(15 * time.Second)}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if p.Actions[0].TwoPlane != nil || !p.Critical[0].Deadline.Equal(at(20*time.Second)) || !p.Critical[0].Incident.Equal(at(time.Second)) {
					t.Errorf("action %+v, critical %+v", p.Actions[0], p.Critical[0])
				}
			},
		},
		{
			name: "bounced once for the early incident: not again once the node is NotReady",
			world: func() *world {
				w := s13(at(2 * time.Minute))
				w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionUnknown
				w.s.Nodes[3].Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(50 * time.Second))
				w.s.Verdicts["node-3"] = liveness.NodeVerdict{Verdict: liveness.Dead, DetectedAt: t0, Since: at(50 * time.Second)}
				terminating(w.s.Pods[0], at(6*time.Second))
				w.s.Deployments[0].Annotations = map[string]string{ScaleBouncedForAnnotation: at(time.Second).Format(time.RFC3339)}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "already scale-bounced once for this incident"},
		},
		{
			// The controller restarted mid-incident: no Lease history, no
			// gossip read yet, so no verdict at all, and its first sight
			// of the NotReady state is now. pkg/unreachable kept the mark
			// on the NotReady node: it still dates the incident.
			name: "bounced once for the early incident, controller restarted (no verdict): not again",
			world: func() *world {
				w := s13(at(2 * time.Minute))
				w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionUnknown
				w.s.Nodes[3].Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(50 * time.Second))
				w.s.Verdicts = nil
				terminating(w.s.Pods[0], at(6*time.Second))
				w.s.Deployments[0].Annotations = map[string]string{ScaleBouncedForAnnotation: at(time.Second).Format(time.RFC3339)}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "already scale-bounced once for this incident"},
		},
		{
			name: "bounced once for the early incident, the restarted controller's verdict Unknown since its first sight: not again",
			world: func() *world {
				w := s13(at(2 * time.Minute))
				w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionUnknown
				w.s.Nodes[3].Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(50 * time.Second))
				w.s.Verdicts["node-3"] = liveness.NodeVerdict{Verdict: liveness.Unknown, Since: at(70 * time.Second), LeaseStale: true, LeaseRenewSeen: at(70 * time.Second)}
				terminating(w.s.Pods[0], at(6*time.Second))
				w.s.Deployments[0].Annotations = map[string]string{ScaleBouncedForAnnotation: at(time.Second).Format(time.RFC3339)}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "already scale-bounced once for this incident"},
		},
		{
			name: "bounced once for the early incident, the verdict left Dead (CutOffFromAPI), the mark kept: not again",
			world: func() *world {
				w := s13(at(2 * time.Minute))
				w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionUnknown
				w.s.Nodes[3].Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(50 * time.Second))
				w.s.Verdicts["node-3"] = liveness.NodeVerdict{Verdict: liveness.CutOffFromAPI, Since: at(50 * time.Second), LeaseStale: true, Reason: "node-1 has it alive"}
				terminating(w.s.Pods[0], at(6*time.Second))
				w.s.Deployments[0].Annotations = map[string]string{ScaleBouncedForAnnotation: at(time.Second).Format(time.RFC3339)}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "already scale-bounced once for this incident"},
		},
		{
			name: "a bounce for an earlier incident, a new mark: the new incident may bounce",
			world: func() *world {
				w := s13(at(2 * time.Minute))
				w.s.Nodes[3].Status.Conditions[0].Status = corev1.ConditionUnknown
				w.s.Nodes[3].Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(50 * time.Second))
				w.s.Verdicts = nil
				terminating(w.s.Pods[0], at(6*time.Second))
				w.s.Deployments[0].Annotations = map[string]string{ScaleBouncedForAnnotation: t0.Add(-time.Hour).Format(time.RFC3339)}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"ScaleDown kube-system/coredns"},
			check: func(t *testing.T, p Plan) {
				if a := p.Actions[0]; !a.Incident.Equal(at(time.Second)) {
					t.Errorf("incident = %v, want the mark's time %v", a.Incident, at(time.Second))
				}
			},
		},
	}
	runPlanCases(t, tests)
}

// TestTwoPlanesNoTarget: a node dead on both planes is no target, for
// any policy, marked or not; the NoTarget reason counts it.
func TestTwoPlanesNoTarget(t *testing.T) {
	w := newWorld(at(time.Minute))
	w.node("node-0", "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
	w.node("node-3", "z1", corev1.ConditionUnknown, t0)
	w.deploymentPod("coredns", "node-3", 1, 0)
	w.policy("default")
	w.s.Verdicts = map[string]liveness.NodeVerdict{"node-0": {Verdict: liveness.Dead, Early: true, DetectedAt: t0}}
	p := PlanFor(w.s)
	if len(p.Actions) != 0 || p.Critical[0].Decision != DecisionNoTarget || !strings.Contains(p.Critical[0].Reason, "Ready in the API but dead on both planes: 1 node(s)") {
		t.Fatalf("plan: %+v\n%s", p.Actions, p.Critical[0].Reason)
	}
}
