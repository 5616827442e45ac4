package scenario

import "testing"

// A wait that ends says where the workload's pods were and which nodes
// were not healthy: what a reader of a CI log needs to tell a slow
// sandbox from a pod moved off its node.
func TestSnapshotSummary(t *testing.T) {
	s := Snapshot{
		Nodes: map[string]NodeState{
			"node-0": {Ready: true}, "node-1": {Ready: true},
			"node-3": {Ready: false, NoExecute: true}, "node-4": {Ready: true, NoExecute: true},
		},
		Zones:     map[string]string{"sandbox/zone-a": "Normal"},
		Pods:      []PodState{{Name: "p-1", Node: "node-0", Ready: true}, {Name: "p-2", Node: "node-3", Terminating: true}, {Name: "p-3"}},
		Available: 1, Desired: 1,
	}
	want := "1/1 available; pod p-1 on node-0, Ready; pod p-2 on node-3, terminating; pod p-3 on no node, not Ready" +
		"; node node-3 NotReady, NoExecute; node node-4 Ready, NoExecute; 2 other node(s) Ready; zone sandbox/zone-a Normal"
	if got := s.Summary(); got != want {
		t.Errorf("Summary() =\n%s\nwant\n%s", got, want)
	}
}
