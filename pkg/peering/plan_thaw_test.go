package peering

import (
	"fmt"
	"testing"
	"time"
)

// TestPlanPartitionHealsNodeByNode: every node goes NotReady at once (the
// set freezes), then the partition heals node by node. The nodes still
// NotReady when the freeze ends get a whole node grace period from the
// thaw (kube-controller-manager's, longer than the prune grace): without
// it the first three nodes back would prune the last two a moment before
// they return (found by TestS7ControlPlanePartitionPeering).
func TestPlanPartitionHealsNodeByNode(t *testing.T) {
	cfg := Config{PruneGracePeriod: 40 * time.Second}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	names := []string{"node-0", "node-1", "node-2", "node-3", "node-4"}
	var nodes []Node
	for i, n := range names {
		nodes = append(nodes, ready(n, i+1, t0))
	}
	res := Plan(Input{Nodes: nodes, Config: cfg}, t0)

	down := t0.Add(10 * time.Second)
	for i, n := range names {
		nodes[i] = notReady(n, i+1, down)
	}
	at := down.Add(90 * time.Second)
	res = Plan(Input{Nodes: nodes, State: res.State, Config: cfg}, at)
	if !res.Frozen || len(res.Peers) != 5 || res.State.FrozenSince != at {
		t.Fatalf("full disruption: frozen=%v, %d peers, frozenSince %v; want frozen with all 5 since %v", res.Frozen, len(res.Peers), res.State.FrozenSince, at)
	}

	// Three nodes return; two are still NotReady since `down`, 100 s ago.
	thaw := at.Add(10 * time.Second)
	for i := range 3 {
		nodes[i] = ready(names[i], i+1, thaw)
	}
	in := Input{Nodes: nodes, State: res.State, Config: cfg}
	res = Plan(in, thaw)
	if res.Frozen || len(res.Peers) != 5 || len(res.Changes) != 0 || res.State.ThawedAt != thaw || !res.State.FrozenSince.IsZero() {
		t.Fatalf("thaw: frozen=%v, peers %v, changes %v, thawedAt %v; want 5 peers, no change, thawed at %v", res.Frozen, res.PeerNames(), changeNames(res.Changes), res.State.ThawedAt, thaw)
	}
	nodeGrace := cfg.WithDefaults().NodeGracePeriod
	if want := thaw.Add(nodeGrace); res.NextCheck != want {
		t.Errorf("next check %v, want the end of the fresh node grace %v", res.NextCheck, want)
	}
	checkIdempotent(t, Input{Nodes: nodes, State: res.State, Config: cfg}, thaw, res)

	// A prune grace after the thaw, within the node grace: still in.
	res = Plan(Input{Nodes: nodes, State: res.State, Config: cfg}, thaw.Add(cfg.PruneGracePeriod+time.Second))
	if len(res.Peers) != 5 {
		t.Errorf("a prune grace after the thaw, within the node grace: peers %v, want all 5", res.PeerNames())
	}
	// Still NotReady a whole node grace after the thaw: now they leave.
	later := thaw.Add(nodeGrace + time.Second)
	res = Plan(Input{Nodes: nodes, State: res.State, Config: cfg}, later)
	if got := fmt.Sprint(res.PeerNames()); got != "[node-0 node-1 node-2]" {
		t.Errorf("a grace after the thaw: peers %s, want [node-0 node-1 node-2]", got)
	}
}

// TestPlanUnseenPartitionHeals: the planner never saw the set frozen (the
// controller restarted, or was cut off with the nodes). Every Ready node
// returned after node-3 and node-4 went NotReady, so their grace counts
// from the first return, not from their NotReady transitions long ago;
// with one node Ready throughout, it counts from their own transitions.
func TestPlanUnseenPartitionHeals(t *testing.T) {
	cfg := Config{PruneGracePeriod: 40 * time.Second}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	names := []string{"node-0", "node-1", "node-2", "node-3", "node-4"}
	down := t0.Add(-10 * time.Minute)
	returned := t0
	var nodes []Node
	state := State{Nodes: map[string]NodeState{}}
	for i, n := range names {
		state.Nodes[n] = NodeState{InSet: true, Since: down.Add(-time.Hour), Address: addr(i + 1)}
		if i < 3 {
			nodes = append(nodes, ready(n, i+1, returned.Add(time.Duration(i)*time.Second)))
		} else {
			nodes = append(nodes, notReady(n, i+1, down))
		}
	}
	res := Plan(Input{Nodes: nodes, State: state, Config: cfg}, returned.Add(10*time.Second))
	if len(res.Peers) != 5 || len(res.Changes) != 0 || res.Frozen {
		t.Fatalf("10 s after the first return: peers %v, changes %v, frozen %v; want all 5 kept in their grace", res.PeerNames(), changeNames(res.Changes), res.Frozen)
	}
	nodeGrace := cfg.WithDefaults().NodeGracePeriod
	if want := returned.Add(nodeGrace); res.NextCheck != want {
		t.Errorf("next check %v, want the end of the node grace counted from the first return %v", res.NextCheck, want)
	}
	res = Plan(Input{Nodes: nodes, State: res.State, Config: cfg}, returned.Add(nodeGrace+time.Second))
	if got := fmt.Sprint(res.PeerNames()); got != "[node-0 node-1 node-2]" {
		t.Errorf("a grace after the first return: peers %s, want [node-0 node-1 node-2]", got)
	}

	// node-0 Ready since before node-3 and node-4 went NotReady: no
	// disruption can have covered them, and they leave at once.
	nodes[0] = ready(names[0], 1, down.Add(-time.Hour))
	res = Plan(Input{Nodes: nodes, State: state, Config: cfg}, returned.Add(10*time.Second))
	if got := fmt.Sprint(res.PeerNames()); got != "[node-0 node-1 node-2]" {
		t.Errorf("one node Ready throughout: peers %s, want [node-0 node-1 node-2]", got)
	}
}
