package e2e

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/internal/sandbox"
)

// TestRecoveryPolicyRejectedWithFieldName: the apiserver itself (the CRD's
// OpenAPI schema and CEL rules) rejects bad RecoveryPolicies, with a
// message that names the field.
func TestRecoveryPolicyRejectedWithFieldName(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 2*time.Minute)
	cl := installRebound(ctx, t, c)

	good := func() *v1alpha1.RecoveryPolicy {
		return &v1alpha1.RecoveryPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: v1alpha1.RecoveryPolicySpec{
				Critical:           v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}},
				MaxUnavailableTime: &metav1.Duration{Duration: 30 * time.Second},
			},
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.RecoveryPolicy)
		want   string
	}{
		{"negative duration", func(p *v1alpha1.RecoveryPolicy) {
			p.Spec.MaxUnavailableTime = &metav1.Duration{Duration: -5 * time.Second}
		}, "spec.maxUnavailableTime"},
		{"duration over an hour", func(p *v1alpha1.RecoveryPolicy) {
			p.Spec.MaxUnavailableTime = &metav1.Duration{Duration: 2 * time.Hour}
		}, "spec.maxUnavailableTime"},
		{"unknown action", func(p *v1alpha1.RecoveryPolicy) { p.Spec.Actions = []v1alpha1.RescueAction{"Reboot"} }, "spec.actions"},
		{"bad selector operator", func(p *v1alpha1.RecoveryPolicy) {
			p.Spec.Critical.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Like", Values: []string{"x"}}}}
		}, "spec.critical.podSelector"},
		{"empty critical selector", func(p *v1alpha1.RecoveryPolicy) { p.Spec.Critical = v1alpha1.CriticalSelector{} }, "spec.critical"},
		{"limit out of range", func(p *v1alpha1.RecoveryPolicy) { p.Spec.Limits.MaxConcurrent = 1000 }, "spec.limits.maxConcurrent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good()
			tc.mutate(p)
			err := cl.Create(ctx, p)
			if err == nil {
				_ = cl.Delete(ctx, p)
				t.Fatalf("apiserver accepted the policy, want an error naming %s", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to name %s", err, tc.want)
			}
		})
	}
	// The good one is accepted and defaulted by the apiserver.
	p := good()
	if err := cl.Create(ctx, p); err != nil {
		t.Fatalf("valid policy rejected: %v", err)
	}
	if len(p.Spec.Actions) != 2 || p.Spec.Limits.MaxActionsPerMinute != 10 || p.Spec.Fencing.Mode != v1alpha1.OutOfServiceTaint {
		t.Errorf("apiserver defaults not applied: %+v", p.Spec)
	}
}

// TestDeployManifestsServerSideApply: everything in deploy/ is valid for
// the real apiserver (server-side apply; the controller Deployment and the
// policy in dry-run, so nothing runs).
func TestDeployManifestsServerSideApply(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 2*time.Minute)
	cl := installRebound(ctx, t, c)
	applied := applyFiles(ctx, t, cl, true,
		repoPath("deploy/controller/namespace.yaml"),
		repoPath("deploy/controller/deployment.yaml"),
		repoPath(defaultPolicyFile),
	)
	if len(applied) < 3 {
		t.Errorf("applied %d objects, want at least the namespace, the Deployment and the policy", len(applied))
	}
}
