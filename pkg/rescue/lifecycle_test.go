package rescue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
)

// TestPlanForRescueLifecycle covers what happens after the first action
// (in flight, replacement timeout, scale bounce across a crash), the
// limits, and the policy switches.
func TestPlanForRescueLifecycle(t *testing.T) {
	tests := []planCase{
		// Deleted pods: the deletionTimestamp is the memory of the action.
		{
			name: "terminating pod: no second delete, scale bounce planned after the timeout",
			world: func() *world {
				w := s1(at(40 * time.Second))
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionInFlight},
			reasons:   map[string]string{coredns: "deleted at 2026-03-01T12:00:31Z, waiting for the replacement: Deployment coredns has 0/1 replicas available; scale bounce at 2026-03-01T12:01:31Z"},
			nextCheck: at(91 * time.Second),
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.InFlight != 1 {
					t.Errorf("in flight = %d, want 1", r.InFlight)
				}
			},
		},
		{
			name: "terminating pod and the Deployment available again: replaced",
			world: func() *world {
				w := s1(at(50 * time.Second))
				terminating(w.s.Pods[0], at(31*time.Second))
				w.s.Deployments[0].Status.AvailableReplicas = 1
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReplaced},
			reasons:   map[string]string{coredns: "rescue complete"},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.InFlight != 0 || r.Stranded != 0 {
					t.Errorf("policy report = %+v, want nothing in flight or stranded", r)
				}
			},
		},
		{
			name: "replacement timeout passed: ScaleDown",
			world: func() *world {
				w := s1(at(92 * time.Second))
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "for longer than the replacement timeout 1m0s: scale bounce Deployment coredns: 1 replicas to 0 now"},
			actions:   []string{"ScaleDown kube-system/coredns"},
			check: func(t *testing.T, p Plan) {
				a := p.Actions[0]
				if a.Replicas != 1 || a.UID != "uid-Deployment-coredns" || a.ResourceVersion != "7" || a.PodRef() != "kube-system/"+coredns {
					t.Errorf("action = %+v", a)
				}
			},
		},
		{
			name: "bare ReplicaSet: deleted, but nothing to scale bounce",
			world: func() *world {
				w := s1(at(2 * time.Minute))
				w.s.ReplicaSets[0].OwnerReferences = nil
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionInFlight},
			reasons:   map[string]string{coredns: "ReplicaSet coredns-5d4f has 0/1 replicas available; no Deployment to scale bounce"},
		},
		{
			name: "custom replacement timeout",
			world: func() *world {
				w := s1(at(45 * time.Second))
				w.s.Defaults.ReplacementTimeout = 10 * time.Second
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"ScaleDown kube-system/coredns"},
		},
		{
			name: "two pods of one Deployment: one ScaleDown",
			world: func() *world {
				w := s1(at(92 * time.Second))
				w.s.Deployments[0].Spec.Replicas = ptr(int32(2))
				terminating(w.s.Pods[0], at(31*time.Second))
				second := w.pod("coredns-5d4f-x2", "node-4", "ReplicaSet", "coredns-5d4f")
				terminating(second, at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct, "coredns-5d4f-x2": DecisionInFlight},
			reasons:   map[string]string{"coredns-5d4f-x2": "ScaleDown kube-system/coredns is planned for pod " + coredns},
			actions:   []string{"ScaleDown kube-system/coredns"},
		},
		{
			name: "ScaleBounce not allowed: stays in flight",
			world: func() *world {
				w := s1(at(92 * time.Second))
				w.s.Policies[0].Spec.Actions = []v1alpha1.RescueAction{v1alpha1.DeleteAndReplace}
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionInFlight},
			reasons:   map[string]string{coredns: "ScaleBounce is not among the policy's actions"},
		},
		{
			name: "only ScaleBounce allowed: scale down instead of delete",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.s.Policies[0].Spec.Actions = []v1alpha1.RescueAction{v1alpha1.ScaleBounce}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"ScaleDown kube-system/coredns"},
		},
		{
			name: "empty actions list: invalid (the API's rule), so nothing selected",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.s.Policies[0].Spec.Actions = []v1alpha1.RescueAction{}
				return w
			},
			decisions: map[string]Decision{},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.Valid || !strings.Contains(r.Error, "spec.actions must list at least one action") {
					t.Errorf("report = %+v", r)
				}
			},
		},
		{
			name: "scale bounce already done for this incident (annotation on the Deployment): not repeated",
			world: func() *world {
				w := s1(at(5 * time.Minute))
				terminating(w.s.Pods[0], at(31*time.Second))
				w.s.Deployments[0].Annotations = map[string]string{ScaleBouncedForAnnotation: "2026-03-01T12:00:00Z"}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "already scale-bounced once for this incident (annotation rebound.dev/scale-bounced-for=2026-03-01T12:00:00Z, node NotReady since 2026-03-01T12:00:00Z)"},
		},

		// Scale bounce across a crash: the annotation is the memory.
		{
			name: "annotation present and 0 replicas: ScaleRestore, pod in flight",
			world: func() *world {
				w := s1(at(93 * time.Second))
				d := w.s.Deployments[0]
				d.Annotations = map[string]string{ScaleBounceAnnotation: "3"}
				d.Spec.Replicas = ptr(int32(0))
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionInFlight},
			reasons:   map[string]string{coredns: "scale bounce of Deployment coredns under way"},
			actions:   []string{"ScaleRestore kube-system/coredns"},
			check: func(t *testing.T, p Plan) {
				if a := p.Actions[0]; a.Replicas != 3 || a.Policy != "default" || a.DryRun || a.ResourceVersion != "7" {
					t.Errorf("restore = %+v", a)
				}
			},
		},
		{
			name: "annotation present, no pod left: ScaleRestore all the same, even in dry run",
			world: func() *world {
				w := newWorld(at(time.Hour))
				w.zoneOf("z1", 3, 0)
				d, _ := w.deployment("apps", "web", 0, 0)
				d.Annotations = map[string]string{ScaleBounceAnnotation: "2"}
				w.policy("default", func(p *v1alpha1.RecoveryPolicy) { p.Spec.DryRun = true })
				return w
			},
			decisions: map[string]Decision{},
			actions:   []string{"ScaleRestore apps/web"},
		},
		{
			name: "annotation present but someone rescaled: warning, no ScaleDown",
			world: func() *world {
				w := s1(at(92 * time.Second))
				w.s.Deployments[0].Annotations = map[string]string{ScaleBounceAnnotation: "1"}
				w.s.Deployments[0].Spec.Replicas = ptr(int32(2))
				terminating(w.s.Pods[0], at(31*time.Second))
				return w
			},
			decisions: map[string]Decision{coredns: DecisionReportOnly},
			reasons:   map[string]string{coredns: "from an earlier scale bounce but has 2 replicas; remove the annotation"},
			check: func(t *testing.T, p Plan) {
				if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "remove the annotation to allow another scale bounce") {
					t.Errorf("warnings = %q", p.Warnings)
				}
			},
		},

		// Limits.
		{
			name: "rate limit from status.lastActions: one slot left",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Limits.MaxActionsPerMinute = 2
				w.s.Policies[0].Status.LastActions = []v1alpha1.ActionRecord{
					record(v1alpha1.RecordedDeleteAndReplace, "kube-system/old", at(30*time.Second)),
					record(v1alpha1.RecordedDeleteAndReplace, "kube-system/older", at(-time.Minute)),                      // out of the window
					{Time: metav1.NewTime(at(40 * time.Second)), Action: v1alpha1.RecordedDeleteAndReplace, DryRun: true}, // dry run: changed nothing
				}
				w.deploymentPod("a", "node-1", 1, 0)
				w.deploymentPod("b", "node-2", 1, 0)
				return w
			},
			// Same deadline for all: namespace and name order.
			decisions: map[string]Decision{"a-5d4f-x1": DecisionAct, "b-5d4f-x1": DecisionRateLimited, coredns: DecisionRateLimited},
			reasons:   map[string]string{"b-5d4f-x1": "maxActionsPerMinute 2 reached; next slot at 2026-03-01T12:01:30Z"},
			actions:   []string{"Delete kube-system/a-5d4f-x1"},
			nextCheck: at(90 * time.Second),
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.ActionsLastMinute != 1 || r.RateLimited != 2 || r.Actions != 1 {
					t.Errorf("policy report = %+v", r)
				}
			},
		},
		{
			name: "rate limit above the 10 records status keeps: full history blocks until its oldest record ages out",
			world: func() *world {
				w := s1(at(2 * time.Minute))
				w.s.Policies[0].Spec.Limits.MaxActionsPerMinute = 20
				for i := range 10 {
					w.s.Policies[0].Status.LastActions = append(w.s.Policies[0].Status.LastActions,
						record(v1alpha1.RecordedDeleteAndReplace, "kube-system/x", at(2*time.Minute-time.Duration(i)*5*time.Second)))
				}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionRateLimited},
			reasons:   map[string]string{coredns: "status.lastActions holds only its last 10 records, all within the last minute"},
			nextCheck: at(2*time.Minute - 45*time.Second + time.Minute),
		},
		{
			// The controller has run for over a minute: its ledger holds
			// the minute's 12 actions (2 more than status keeps), so the
			// count is exact and 8 of the limit's 20 remain.
			name: "full history, a ledger older than a minute: the ledger's exact count applies",
			world: func() *world {
				w := s1(at(2 * time.Minute))
				w.s.Policies[0].Spec.Limits.MaxActionsPerMinute = 20
				w.s.LedgerSince = at(0)
				for i := range 12 {
					rec := record(v1alpha1.RecordedDeleteAndReplace, fmt.Sprintf("kube-system/x-%d", i), at(2*time.Minute-time.Duration(i)*4*time.Second))
					if i < 10 {
						w.s.Policies[0].Status.LastActions = append(w.s.Policies[0].Status.LastActions, rec)
					}
					w.s.RecentActions = append(w.s.RecentActions, LedgerEntry{Policy: "default", Record: rec})
				}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.ActionsLastMinute != 12 {
					t.Errorf("actions in the last minute = %d, want the ledger's 12", r.ActionsLastMinute)
				}
			},
		},
		{
			// The same, 30 s after a restart: the ledger may miss the
			// minute's start, so the full history still holds.
			name: "full history, a ledger younger than a minute: still blocks",
			world: func() *world {
				w := s1(at(2 * time.Minute))
				w.s.Policies[0].Spec.Limits.MaxActionsPerMinute = 20
				w.s.LedgerSince = at(90 * time.Second)
				for i := range 10 {
					w.s.Policies[0].Status.LastActions = append(w.s.Policies[0].Status.LastActions,
						record(v1alpha1.RecordedDeleteAndReplace, "kube-system/x", at(2*time.Minute-time.Duration(i)*5*time.Second)))
				}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionRateLimited},
			reasons:   map[string]string{coredns: "status.lastActions holds only its last 10 records, all within the last minute"},
			nextCheck: at(2*time.Minute - 45*time.Second + time.Minute),
		},
		{
			name: "full history, oldest record out of the window: counted normally",
			world: func() *world {
				w := s1(at(2 * time.Minute))
				w.s.Policies[0].Spec.Limits.MaxActionsPerMinute = 20
				for i := range 10 {
					w.s.Policies[0].Status.LastActions = append(w.s.Policies[0].Status.LastActions,
						record(v1alpha1.RecordedDeleteAndReplace, "kube-system/x", at(2*time.Minute-time.Duration(i)*7*time.Second)))
				}
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "rate limit: the pod stranded longest goes first",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Limits.MaxActionsPerMinute = 1
				w.node("node-5", "z1", corev1.ConditionUnknown, at(-10*time.Second))
				w.deploymentPod("z-late", "node-5", 1, 0)
				return w
			},
			decisions: map[string]Decision{"z-late-5d4f-x1": DecisionAct, coredns: DecisionRateLimited},
			actions:   []string{"Delete kube-system/z-late-5d4f-x1"},
			nextCheck: at(2 * time.Minute),
		},
		{
			name: "concurrency limit: a rescue in flight blocks a new one",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Limits.MaxConcurrent = 1
				terminating(w.deploymentPod("a", "node-1", 1, 0), at(35*time.Second))
				return w
			},
			decisions: map[string]Decision{"a-5d4f-x1": DecisionInFlight, coredns: DecisionRateLimited},
			reasons:   map[string]string{coredns: "maxConcurrent 1 reached (1 rescues in flight)"},
			nextCheck: at(95 * time.Second), // a's scale-bounce timer, not the concurrency slot
		},
		{
			name: "concurrency limit counts this plan's own deletes",
			world: func() *world {
				w := s1(at(time.Minute))
				w.s.Policies[0].Spec.Limits.MaxConcurrent = 1
				w.deploymentPod("a", "node-1", 1, 0)
				return w
			},
			decisions: map[string]Decision{"a-5d4f-x1": DecisionAct, coredns: DecisionRateLimited},
			actions:   []string{"Delete kube-system/a-5d4f-x1"},
		},

		// Policy switches.
		{
			name: "dry run: actions listed and flagged",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.s.Policies[0].Spec.DryRun = true
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "dry run: stranded Deployment/coredns pod"},
			actions:   []string{"Delete kube-system/" + coredns + "+dry"},
		},
		{
			name: "suspended policy: reported, no action",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.s.Policies[0].Spec.Suspend = true
				return w
			},
			decisions: map[string]Decision{coredns: DecisionSuspended},
			reasons:   map[string]string{coredns: "policy default is suspended, so no action; it would: stranded Deployment/coredns pod: delete it"},
		},
		{
			name: "an active policy wins over a suspended one, whatever the names",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.s.Policies[0].Spec.Suspend = true
				w.policy("z-active", func(p *v1alpha1.RecoveryPolicy) {
					p.Spec.Critical = v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}}
				})
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				c := p.Critical[0]
				if c.Policy != "z-active" || !strings.Contains(c.PolicyNote, "selected by policies default, z-active; z-active applies") {
					t.Errorf("policy %q note %q", c.Policy, c.PolicyNote)
				}
			},
		},
		{
			name: "several active policies: the first by name applies",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.policy("a-first", func(p *v1alpha1.RecoveryPolicy) {
					p.Spec.Critical = v1alpha1.CriticalSelector{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "coredns"}}}
					p.Spec.MaxUnavailableTime = &metav1.Duration{Duration: 20 * time.Second}
				})
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			reasons:   map[string]string{coredns: "maxUnavailableTime 20s"},
			actions:   []string{"Delete kube-system/" + coredns},
		},
		{
			name: "bad selector: that policy is invalid, the others still work",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.policy("a-bad", func(p *v1alpha1.RecoveryPolicy) {
					p.Spec.Critical = v1alpha1.CriticalSelector{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "app", Operator: "Sometimes", Values: []string{"x"}}}}}
					p.Spec.MaxUnavailableTime = &metav1.Duration{Duration: -time.Second}
					p.Spec.Actions = []v1alpha1.RescueAction{"Reboot"}
				})
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete kube-system/" + coredns},
			check: func(t *testing.T, p Plan) {
				bad := p.Policies[0]
				if bad.Name != "a-bad" || bad.Valid {
					t.Fatalf("first report = %+v, want a-bad invalid", bad)
				}
				for _, field := range []string{"spec.critical.podSelector", "spec.maxUnavailableTime", `spec.actions[0]: Unsupported value: "Reboot"`} {
					if !strings.Contains(bad.Error, field) {
						t.Errorf("error %q does not name %s", bad.Error, field)
					}
				}
				if good := p.Policies[1]; !good.Valid || good.Actions != 1 {
					t.Errorf("second report = %+v", good)
				}
			},
		},
		{
			name: "policy without any selector is invalid rather than selecting everything",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.s.Policies[0].Spec.Critical = v1alpha1.CriticalSelector{}
				return w
			},
			decisions: map[string]Decision{},
			check: func(t *testing.T, p Plan) {
				if r := p.Policies[0]; r.Valid || !strings.Contains(r.Error, "spec.critical selects nothing") {
					t.Errorf("report = %+v", r)
				}
			},
		},
		{
			name: "namespace selector reads the namespace's labels",
			world: func() *world {
				w := s1(at(31 * time.Second))
				w.s.Policies[0].Spec.Critical = v1alpha1.CriticalSelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}}
				w.s.Pods[0].Namespace = "apps"
				w.s.ReplicaSets[0].Namespace = "apps"
				w.s.Deployments[0].Namespace = "apps"
				return w
			},
			decisions: map[string]Decision{coredns: DecisionAct},
			actions:   []string{"Delete apps/" + coredns},
		},
	}
	runPlanCases(t, tests)
}
