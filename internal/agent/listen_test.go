package agent

import (
	"net"
	"strings"
	"testing"
)

// TestDefaultListen: each mode has its own default ports, so that the
// agents that may share a host's network (the BIRD agent, a gossip-only
// member, the rejoin agent) never take one port by default.
func TestDefaultListen(t *testing.T) {
	modes := []struct {
		name          string
		opts          Options
		health, metrs string
	}{
		{"BIRD agent", Options{}, ":9810", ":9811"},
		{"BIRD agent that gossips too", Options{Gossip: GossipOptions{KeyFile: "/k"}}, ":9810", ":9811"},
		{"gossip only", Options{GossipOnly: true, Gossip: GossipOptions{KeyFile: "/k"}}, ":9813", ":9814"},
		{"rejoin only", Options{RejoinOnly: true}, ":9812", "0"},
		{"once, before BIRD", Options{Once: true}, ":9810", "0"},
	}
	for _, m := range modes {
		h, mt := m.opts.DefaultListen()
		if h != m.health || mt != m.metrs {
			t.Errorf("%s: default --health-addr %s, --metrics-bind-address %s; want %s, %s", m.name, h, mt, m.health, m.metrs)
		}
	}
	// The long-running agents that can run together on one host: the
	// BIRD agent, the gossip-only member, the rejoin agent.
	taken := map[string]string{}
	for _, m := range modes[2:4] {
		h, mt := m.opts.DefaultListen()
		for _, a := range []string{h, mt} {
			if a == "0" {
				continue
			}
			if other, ok := taken[a]; ok {
				t.Errorf("%s is the default of two agents that may share a host: %s and %s", a, m.name, other)
			}
			taken[a] = m.name
		}
	}
	for _, a := range []string{DefaultHealthAddr, DefaultMetricsAddr} {
		if other, ok := taken[a]; ok {
			t.Errorf("%s is the BIRD agent's default and %s's", a, other)
		}
	}
}

// TestCheckListen: the probe and metrics servers of one agent may not
// share a port; the error names both flags.
func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		name            string
		opts            Options
		health, metrics string
		want            string // "" means fine
	}{
		{name: "defaults", health: ":9810", metrics: ":9811"},
		{name: "probes off", health: "", metrics: ":9810"},
		{name: "metrics off", health: ":9810", metrics: "0"},
		{name: "two addresses, one port", health: "10.0.0.1:9810", metrics: "10.0.0.2:9810"},
		{name: "one port", health: ":9814", metrics: ":9814", want: "--health-addr :9814 and --metrics-bind-address :9814 share a port"},
		{name: "every address and one of them", health: "0.0.0.0:9810", metrics: "127.0.0.1:9810", want: "share a port"},
		{name: "gossip only moved onto the metrics port", opts: Options{GossipOnly: true}, health: ":9814", metrics: ":9814", want: "share a port"},
		{name: "rejoin serves no metrics", opts: Options{RejoinOnly: true}, health: ":9811", metrics: ":9811"},
		{name: "not an address", health: "9810", metrics: ":9811", want: `--health-addr "9810": want HOST:PORT`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckListen(tc.opts, tc.health, tc.metrics)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want fine, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestListenTakenPort: when another process (another agent on the host
// network) holds the port, the error names the flag to change.
func TestListenTakenPort(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	addr := other.Addr().String()
	for _, flag := range []string{"--health-addr", "--metrics-bind-address"} {
		ln, err := Listen(flag, addr)
		if err == nil {
			ln.Close()
			t.Fatalf("%s %s: listened on a taken port", flag, addr)
		}
		for _, want := range []string{flag + " " + addr, "address already in use", "set " + flag + " to a free address"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	}
	ln, err := Listen("--health-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("a free port: %v", err)
	}
	ln.Close()
}
