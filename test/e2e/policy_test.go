package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/policyfile"
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
	t.Run("policy validate gives the apiserver's verdict on the corpus", func(t *testing.T) {
		policyCorpusAgrees(ctx, t, cl)
	})
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
	applied := applyFiles(ctx, t, cl, true, append([]string{
		repoPath("deploy/controller/namespace.yaml"),
		repoPath("deploy/controller/deployment.yaml"),
		repoPath(defaultPolicyFile),
	}, rbacFiles()...)...) // and deploy/rbac, the controller's admission policies included
	if len(applied) < 3 {
		t.Errorf("applied %d objects, want at least the namespace, the Deployment and the policy", len(applied))
	}
}

// policyCorpusAgrees feeds every document of the policy corpus
// (pkg/policyfile/testdata/policies) to the built `rebound policy validate
// -o json` and to the sandbox's apiserver (a dry-run create with strict
// field validation, as kubectl sends it) and requires the same verdict;
// a rejection must name the field the document's header names, in both.
func policyCorpusAgrees(ctx context.Context, t *testing.T, cl client.Client) {
	cases, err := policyfile.ReadCorpus(repoPath("pkg/policyfile/testdata/policies"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.File), func(t *testing.T) {
			r := runCLI(ctx, t, reboundBinary, "policy", "validate", "-o", "json", c.File)
			var got []struct {
				Valid          bool     `json:"valid"`
				APIServerValid bool     `json:"apiserverValid"`
				Errors         []string `json:"errors"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 {
				t.Fatalf("rebound policy validate -o json: %v\nstdout:\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
			}
			cliErrs := strings.Join(got[0].Errors, "\n")

			data, err := os.ReadFile(c.File)
			if err != nil {
				t.Fatal(err)
			}
			var obj unstructured.Unstructured
			if err := yaml.Unmarshal(data, &obj.Object); err != nil {
				t.Fatal(err)
			}
			apiErr := cl.Create(ctx, &obj, client.DryRunAll, client.FieldValidation("Strict"))
			t.Logf("apiserver: %v", apiErr)
			t.Logf("rebound policy validate (exit %d): %s", r.code, cliErrs)

			if got[0].APIServerValid != (apiErr == nil) {
				t.Fatalf("verdicts differ: rebound policy validate says apiserver-valid=%v, the apiserver says %v", got[0].APIServerValid, apiErr)
			}
			if wantValid := c.Field == ""; (apiErr == nil) != wantValid {
				t.Errorf("apiserver verdict %v, the corpus says %q", apiErr, c.Field)
			}
			if (r.code == 0) != got[0].Valid || (c.Field == "" && r.code != 0) {
				t.Errorf("exit code %d for valid=%v", r.code, got[0].Valid)
			}
			if c.Field != "" {
				if !strings.Contains(apiErr.Error(), c.Field) {
					t.Errorf("the apiserver's error does not name %s: %v", c.Field, apiErr)
				}
				if !strings.Contains(cliErrs, c.Field) {
					t.Errorf("rebound policy validate does not name %s:\n%s", c.Field, cliErrs)
				}
			}
		})
	}
}
