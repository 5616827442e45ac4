package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runDiagnose runs newDiagnoseCommand on its own (main.go registers it).
func runDiagnose(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	cmd := newDiagnoseCommand()
	var o, e bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(t.Context())
	return o.String(), err
}

func exitCodeOf(err error) int {
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestDiagnoseHelpTeaches(t *testing.T) {
	out, err := runDiagnose(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PartialDisruption", "Exit codes:", "rebound-diagnose", "--unhealthy-zone-threshold", "--kubeconfig", "-o, --output", "--timeout", "docs/diagnose.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestDiagnoseExitCodes: what cannot be looked at ends with exit code 2
// and one line, through main's exitCoder.
func TestDiagnoseExitCodes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + l.Addr().String()
	l.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+server+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", kubeconfig}, "cannot reach the Kubernetes API at " + server + ": connection refused"},
		{[]string{"--kubeconfig", kubeconfig, "-o", "xml"}, `--output "xml" is not supported`},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"--kubeconfig", kubeconfig, "--unhealthy-zone-threshold", "-1"}, "--unhealthy-zone-threshold"},
	}
	for _, tc := range cases {
		out, err := runDiagnose(t, tc.args...)
		if code := exitCodeOf(err); code != 2 || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: exit code %d, error %v; want 2 and one line with %q", tc.args, code, err, tc.want)
		}
		if out != "" {
			t.Errorf("%v: printed %q on stdout, want nothing", tc.args, out)
		}
	}
}
