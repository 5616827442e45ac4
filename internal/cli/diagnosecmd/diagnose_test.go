package diagnosecmd

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rebound/pkg/exitcode"
)

// runDiagnose runs the command on its own, as rebound and kubectl-rebound
// register it.
func runDiagnose(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	cmd := NewCommand()
	var o, e bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(t.Context())
	return o.String(), err
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
// and one line, carried by the error (pkg/exitcode).
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
		if code := exitcode.Of(err, exitcode.Failed); code != 2 || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: exit code %d, error %v; want 2 and one line with %q", tc.args, code, err, tc.want)
		}
		if out != "" {
			t.Errorf("%v: printed %q on stdout, want nothing", tc.args, out)
		}
	}
}

// TestDiagnoseDeprecatedFlags: diagnose's former names of the peering
// settings still parse, and say what to use instead.
func TestDiagnoseDeprecatedFlags(t *testing.T) {
	cmd := NewCommand()
	var o, e bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs([]string{"--prune-grace-period", "7s", "--session-report-max-age", "9s", "-o", "xml"})
	_ = cmd.ExecuteContext(t.Context()) // fails on -o xml, after parsing
	for _, want := range []string{"--prune-grace-period has been deprecated, use --peering-prune-grace-period", "--session-report-max-age has been deprecated, use --peering-report-max-age"} {
		if !strings.Contains(o.String()+e.String(), want) {
			t.Errorf("output %q lacks %q", o.String()+e.String(), want)
		}
	}
	for name, want := range map[string]string{"peering-prune-grace-period": "7s", "peering-report-max-age": "9s"} {
		if got := cmd.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}
}
