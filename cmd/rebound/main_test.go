package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rebound/pkg/exitcode"
)

func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newRootCommand()
	var o, e bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(t.Context())
	return o.String(), e.String(), err
}

func TestPolicyValidate(t *testing.T) {
	out, _, err := run(t, "policy", "validate", "../../deploy/policy/default-recoverypolicy.yaml")
	if err != nil || !strings.Contains(out, `"default" is valid`) {
		t.Fatalf("default policy: out %q, err %v; want valid", out, err)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {name: x}\nspec:\n  maxUnavailableTime: -3s\n  critical: {namespaces: [kube-system]}\n  colour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "policy", "validate", "-o", "json", bad)
	if exitcode.Of(err, exitcode.OK) != 1 {
		t.Fatalf("bad policy: err %v, want exit code 1", err)
	}
	var results []struct {
		Valid  bool
		Errors []string
	}
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("-o json output is not JSON: %v\n%s", err, out)
	}
	joined := strings.Join(results[0].Errors, "\n")
	if results[0].Valid || !strings.Contains(joined, "spec.maxUnavailableTime") || !strings.Contains(joined, "colour") {
		t.Errorf("errors = %q, want spec.maxUnavailableTime and the unknown field named", joined)
	}
}

func TestOutputFlagRejectsUnknownFormat(t *testing.T) {
	_, _, err := run(t, "version", "-o", "xml")
	if err == nil || !strings.Contains(err.Error(), "--output") {
		t.Fatalf("err = %v, want an error naming --output", err)
	}
}

func TestControllerRejectsBadZoneFlag(t *testing.T) {
	_, _, err := run(t, "controller", "--unhealthy-zone-threshold", "-1", "--kubeconfig", "/nonexistent")
	if err == nil || !strings.Contains(err.Error(), "unhealthy-zone-threshold") {
		t.Fatalf("err = %v, want an error naming --unhealthy-zone-threshold", err)
	}
}
