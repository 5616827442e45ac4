package agentcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rebound/internal/agent"
)

// TestListenAddrsByMode: without --health-addr and --metrics-bind-address
// each mode takes its own ports, so that a gossip-only member and the BIRD
// agent on one host's network do not collide; given flags always win,
// an empty --health-addr included (probes off).
func TestListenAddrsByMode(t *testing.T) {
	for _, tc := range []struct {
		name            string
		args            []string
		health, metrics string
	}{
		{name: "BIRD agent", args: nil, health: ":9810", metrics: ":9811"},
		{name: "gossip only", args: []string{"--gossip-only"}, health: ":9813", metrics: ":9814"},
		{name: "rejoin only", args: []string{"--rejoin-only"}, health: ":9812", metrics: "0"},
		{name: "gossip only, ports given", args: []string{"--gossip-only", "--health-addr=:9900", "--metrics-bind-address=:9901"}, health: ":9900", metrics: ":9901"},
		{name: "gossip only, probes off", args: []string{"--gossip-only", "--health-addr="}, health: "", metrics: ":9814"},
		{name: "BIRD agent, metrics off", args: []string{"--metrics-bind-address=0"}, health: ":9810", metrics: "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := NewCommand()
			f := cmd.Flags()
			if err := f.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var opts agent.Options
			opts.GossipOnly, _ = f.GetBool("gossip-only")
			opts.RejoinOnly, _ = f.GetBool("rejoin-only")
			health, _ := f.GetString("health-addr")
			metrics, _ := f.GetString("metrics-bind-address")
			gotHealth, gotMetrics := listenAddrs(f, opts, health, metrics)
			if gotHealth != tc.health || gotMetrics != tc.metrics {
				t.Errorf("%v: --health-addr %q, --metrics-bind-address %q; want %q, %q", tc.args, gotHealth, gotMetrics, tc.health, tc.metrics)
			}
		})
	}
}

// TestAgentRefusesBadSettingsAtStart: bad watcher counts and clashing
// ports stop the agent before it connects anywhere, each named by its
// flag.
func TestAgentRefusesBadSettingsAtStart(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, bytes.Repeat([]byte("k"), 32), 0o600); err != nil {
		t.Fatal(err)
	}
	gossipOnly := []string{"--gossip-only", "--node-name=n1", "--gossip-key-file=" + key, "--gossip-join=10.0.0.1", "--gossip-bind-address=10.0.0.2",
		"--kubeconfig=" + filepath.Join(t.TempDir(), "absent")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "valid: goes on to read its kubeconfig", args: nil, want: "absent"},
		{name: "no watchers", args: []string{"--gossip-watchers=0"}, want: "--gossip-watchers 0: want 2 to 7"},
		{name: "a lone watcher", args: []string{"--gossip-watchers=1"}, want: "--gossip-watchers 1: a lone watcher"},
		{name: "more watchers than a report holds", args: []string{"--gossip-watchers=8"}, want: "--gossip-watchers 8"},
		{name: "probes on the metrics port", args: []string{"--health-addr=:9814"}, want: "--health-addr :9814 and --metrics-bind-address :9814 share a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := NewCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append(append([]string{}, gossipOnly...), tc.args...))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if tc.args != nil && strings.Contains(err.Error(), "absent") {
				t.Errorf("error %v: the agent went on to connect", err)
			}
		})
	}
}
