package agent

import (
	"strings"
	"testing"
	"time"

	"rebound/pkg/peering/bird"
)

func TestSessionStatesIgnorePeersOutsideTheSet(t *testing.T) {
	set := peersOf("node-b", "node-c", "node-d")
	protos := []bird.Protocol{
		{Name: "device1", Proto: "Device", State: "up"},
		{Name: bird.ProtocolName(set[0].Address), Proto: "BGP", State: "up", Since: "15:40:29", Info: "Established"},
		{Name: bird.ProtocolName(set[1].Address), Proto: "BGP", State: "start", Info: "Active        Socket: Connection refused"},
		// A leftover protocol to a pruned node, dead: not in the set.
		{Name: "Mesh_10_0_0_99", Proto: "BGP", State: "start", Info: "Connect"},
	}
	readAt := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ss := sessions(set, protos, &bird.Status{ServerTime: "2026-01-01 15:40:39"}, readAt)
	got := viewOf(ss, nil).states
	want := map[string]string{"node-b": "Established", "node-c": "Active", "node-d": StateNotConfigured}
	if len(got) != len(want) {
		t.Fatalf("states = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// node-b's since is 10 s before BIRD's clock: 10 s before the read.
	if !ss[0].Since.Equal(readAt.Add(-10*time.Second)) || !ss[1].Since.IsZero() {
		t.Errorf("since times: %+v", ss)
	}
	// Without BIRD's clock, no since time is guessed.
	if ss := sessions(set, protos, nil, readAt); !ss[0].Since.IsZero() {
		t.Errorf("since without status: %v", ss[0].Since)
	}
}

func TestReadiness(t *testing.T) {
	const after = 3 * time.Minute
	rep := func(states map[string]string) *sessionView { return &sessionView{states: states} }
	tests := []struct {
		name   string
		report *sessionView
		up     time.Duration
		ready  bool
		reason string
	}{
		{"not read yet", nil, time.Hour, false, "not been read"},
		{"BIRD unreachable", &sessionView{err: "BIRD control socket /x does not answer"}, time.Hour, false, "/x"},
		{"alone in the set", rep(map[string]string{}), 0, true, "no other node"},
		{"all in-set peers established", rep(map[string]string{"node-b": "Established", "node-c": "Established"}), 0, true, "all 2 peers"},
		{"an in-set peer down", rep(map[string]string{"node-b": "Established", "node-c": "Active"}), time.Minute, false, "node-c (Active)"},
		{"an in-set peer down, up long enough", rep(map[string]string{"node-c": "Active"}), after, true, "not waiting any longer for node-c"},
		{"a NotReady member without evidence of life does not hold it back", &sessionView{states: map[string]string{"node-b": "Established", "node-c": "Active"}, unexpected: map[string]bool{"node-c": true}}, 0, true, "all 1 peers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := readiness(tc.report, tc.up, after)
			if got.Ready != tc.ready || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("readiness = %+v, want ready=%v and a reason with %q", got, tc.ready, tc.reason)
			}
		})
	}
}
