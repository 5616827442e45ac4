package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: secret}
contexts:
- name: ctx-a
  context: {cluster: a, user: u, namespace: team-a}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`

// parse registers the flags on a fresh command and parses args, with
// HOME and KUBECONFIG as given.
func parse(t *testing.T, env map[string]string, omit Omit, args ...string) *KubeFlags {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for k, v := range env {
		t.Setenv(k, v)
	}
	cmd := &cobra.Command{Use: "x"}
	k := AddKubeFlags(cmd, omit)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKubeFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(file, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		host     string
		imp      string
		errorHas string
	}{
		{name: "--kubeconfig", args: []string{"--kubeconfig", file}, host: "https://a.example:6443"},
		{name: "KUBECONFIG only", env: map[string]string{"KUBECONFIG": file}, host: "https://a.example:6443"},
		{name: "--context", args: []string{"--kubeconfig", file, "--context", "ctx-b"}, host: "https://b.example:6443"},
		{name: "--as", args: []string{"--kubeconfig", file, "--as", "jane"}, host: "https://a.example:6443", imp: "jane"},
		{name: "--server and --token", args: []string{"--server", "https://c.example", "--token", "t"}, host: "https://c.example"},
		{name: "nothing", errorHas: "no Kubernetes API to talk to: no kubeconfig found"},
		{name: "missing file", args: []string{"--kubeconfig", "/does/not/exist"}, errorHas: "/does/not/exist"},
		{name: "unknown context", args: []string{"--kubeconfig", file, "--context", "nope"}, errorHas: "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := parse(t, tc.env, Omit{}, tc.args...)
			cfg, err := k.RESTConfig("test")
			if tc.errorHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errorHas) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errorHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || cfg.UserAgent != "test" || cfg.Impersonate.UserName != tc.imp {
				t.Errorf("host %q agent %q as %q; want %q test %q", cfg.Host, cfg.UserAgent, cfg.Impersonate.UserName, tc.host, tc.imp)
			}
		})
	}
}

func TestKubeFlagsNamespace(t *testing.T) {
	k := parse(t, nil, Omit{}, "-n", "ops")
	if got := k.Namespace("rebound-system"); got != "ops" {
		t.Errorf("-n ops: %q", got)
	}
	k = parse(t, nil, Omit{})
	if got := k.Namespace("rebound-system"); got != "rebound-system" {
		t.Errorf("default: %q", got)
	}
}

// TestKubeFlagsOmit: the agent's --as is its AS number, so impersonation
// is left out; commands without a namespace have no -n.
func TestKubeFlagsOmit(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	AddKubeFlags(cmd, Omit{Namespace: true, Impersonation: true})
	for _, f := range []string{"as", "as-group", "as-uid", "namespace"} {
		if cmd.Flags().Lookup(f) != nil {
			t.Errorf("--%s registered", f)
		}
	}
	for _, f := range []string{"kubeconfig", "context", "token", "server", "cluster", "user", "request-timeout"} {
		if cmd.Flags().Lookup(f) == nil {
			t.Errorf("--%s missing", f)
		}
	}
}
