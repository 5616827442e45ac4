package policyfile

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
)

// TestCorpus: every document of the corpus gets the verdict its first
// line states, and a rejection names the field, never a Go decoder's
// message.
func TestCorpus(t *testing.T) {
	cases, err := ReadCorpus("testdata/policies")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.File, func(t *testing.T) {
			data, err := os.ReadFile(c.File)
			if err != nil {
				t.Fatal(err)
			}
			r := Check(data)
			msgs := strings.Join(Messages(r.Errors), "\n")
			t.Logf("errors:\n%s", msgs)
			if c.Field == "" {
				if !r.Valid() || r.Policy == nil {
					t.Fatalf("rejected a valid policy:\n%s", msgs)
				}
				return
			}
			if r.Valid() {
				t.Fatalf("accepted, want an error naming %s", c.Field)
			}
			if !strings.Contains(msgs, c.Field) {
				t.Errorf("errors do not name %s:\n%s", c.Field, msgs)
			}
			for _, bad := range []string{"<document>", "json:", "cannot unmarshal", "Go struct"} {
				if strings.Contains(msgs, bad) {
					t.Errorf("errors carry a decoder's message (%q):\n%s", bad, msgs)
				}
			}
		})
	}
}

// TestDefault: the default policy is the YAML's, defaulted from the
// CRD's schema.
func TestDefault(t *testing.T) {
	p := Default()
	want := v1alpha1.RecoveryPolicySpec{
		Critical: v1alpha1.CriticalSelector{
			Namespaces:         []string{"kube-system", "rebound-system"},
			PriorityClassNames: []string{"system-cluster-critical", "system-node-critical"},
		},
		MaxUnavailableTime: &metav1.Duration{Duration: 30 * time.Second},
		Detection:          v1alpha1.DetectionNotReady,
		Actions:            []v1alpha1.RescueAction{v1alpha1.DeleteAndReplace, v1alpha1.ScaleBounce},
		Fencing:            v1alpha1.FencingPolicy{Mode: v1alpha1.OutOfServiceTaint},
		Limits:             v1alpha1.Limits{MaxActionsPerMinute: 10, MaxConcurrent: 5},
	}
	if p.Name != "default" || !reflect.DeepEqual(p.Spec, want) {
		t.Errorf("Default() = %s %+v, want default %+v", p.Name, p.Spec, want)
	}
	p.Spec.Critical.Namespaces[0] = "changed"
	if Default().Spec.Critical.Namespaces[0] != "kube-system" {
		t.Error("Default() returns a shared object")
	}
}

// TestSchemaDefaults: what the apiserver fills in for a minimal policy.
func TestSchemaDefaults(t *testing.T) {
	r := Check([]byte("apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {name: x}\nspec:\n  critical: {namespaces: [a]}\n  fencing: {}\n"))
	if !r.Valid() {
		t.Fatal(r.Errors)
	}
	s := r.Policy.Spec
	if s.MaxUnavailableTime == nil || s.MaxUnavailableTime.Duration != 30*time.Second || len(s.Actions) != 2 ||
		s.Fencing.Mode != v1alpha1.OutOfServiceTaint || s.Limits.MaxActionsPerMinute != 10 || s.Limits.MaxConcurrent != 5 {
		t.Errorf("defaults = %+v", s)
	}
}

func TestWarnings(t *testing.T) {
	r := Check([]byte("apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {name: x}\nspec:\n  critical:\n    podSelector: {matchLabels: {\"not a key\": x}}\n"))
	if !r.Valid() || len(r.Warnings) == 0 || !strings.Contains(r.Warnings.ToAggregate().Error(), "spec.critical.podSelector.matchLabels") {
		t.Errorf("bad label key: errors %v, warnings %v; want accepted with a warning naming the field", r.Errors, r.Warnings)
	}
}
