package peering

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// Attack rows on the peering planner at a stall's edges (the Lease-stall
// freeze, wasMember). Rows that fail are defects (see their comments).

// stallLeases is a Lease plane: stale ones last renewed at stale, fresh
// ones a second before now; renew interval 10 s.
func stallLeases(now, stale time.Time, staleNodes, fresh []string) map[string]liveness.Lease {
	out := map[string]liveness.Lease{}
	for _, n := range staleNodes {
		out[n] = liveness.Lease{RenewSeen: stale, RenewInterval: 10 * time.Second}
	}
	for _, n := range fresh {
		out[n] = liveness.Lease{RenewSeen: now.Add(-time.Second), RenewInterval: 10 * time.Second}
	}
	return out
}

func TestStallFreezeAttack(t *testing.T) {
	long := t0.Add(-time.Hour)
	tests := []struct {
		name       string
		nodes      []Node
		leases     map[string]liveness.Lease
		state      State
		firstSeen  map[string]time.Time
		wantFrozen string // substring; "" for not frozen
		wantPeers  int
	}{
		{
			// Holds: nodes without a Lease in the tracker (partial
			// informer, Lease-less nodes) do not break the stall.
			name:       "Lease stall, the Ready nodes' Leases unknown: frozen",
			nodes:      []Node{ready("a", 1, long), ready("b", 2, long), notReady("c", 3, long), notReady("d", 4, long), notReady("e", 5, long)},
			leases:     stallLeases(t0, long, []string{"c", "d", "e"}, nil),
			state:      State{Nodes: members("a", "b", "c", "d", "e")},
			wantFrozen: "no node's Lease renews",
			wantPeers:  5,
		},
		{
			// Holds: a Lease with no Node object (a node deleted while
			// its Lease stays, or a Lease created by hand) renewing does
			// not end the stall: the plane counts the planner's nodes.
			name:       "Lease stall, a fresh Lease for a node that has no Node object: still frozen",
			nodes:      []Node{ready("a", 1, long), ready("b", 2, long), notReady("c", 3, long), notReady("d", 4, long), notReady("e", 5, long)},
			leases:     stallLeases(t0, long, []string{"a", "b", "c", "d", "e"}, []string{"ghost"}),
			state:      State{Nodes: members("a", "b", "c", "d", "e")},
			wantFrozen: "no node's Lease renews",
			wantPeers:  5,
		},
		{
			// Holds: a controller restarted mid-stall (no state, the
			// tracker's first sight a renewal, its clocks from now): 4 of
			// 7 flipped NotReady, nobody leaves.
			name: "restart mid-stall: fresh state, every Lease first seen now, 4 of 7 NotReady: nobody leaves",
			nodes: []Node{ready("a", 1, long), ready("b", 2, long), ready("c", 3, long),
				notReady("d", 4, t0.Add(-20*time.Second)), notReady("e", 5, t0.Add(-20*time.Second)), notReady("f", 6, t0.Add(-20*time.Second)), notReady("g", 7, t0.Add(-20*time.Second))},
			leases:    stallLeases(t0, t0, nil, []string{"a", "b", "c", "d", "e", "f", "g"}),
			firstSeen: map[string]time.Time{"d": t0, "e": t0, "f": t0, "g": t0},
			wantPeers: 7,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Nodes: tc.nodes, Leases: tc.leases, State: tc.state, FirstSeen: tc.firstSeen}
			res := Plan(in, t0)
			if (tc.wantFrozen == "") == res.Frozen || !strings.Contains(res.FrozenReason, tc.wantFrozen) {
				t.Errorf("frozen=%v %q, want reason with %q", res.Frozen, res.FrozenReason, tc.wantFrozen)
			}
			if len(res.Peers) != tc.wantPeers {
				t.Errorf("peers %v, want %d", res.PeerNames(), tc.wantPeers)
			}
		})
	}
}

// TestStallEndSlowNodesAttack: a Lease stall (every kubelet cut from the
// API; the Ready flags all flip) ends; 8 of 10 nodes are back at once,
// node-8 and node-9 take 45 s (kubelets reconnecting through dead HTTP/2
// connections). kube-controller-manager resets every node's probe time when
// full disruption ends and judges them only its node grace period (50 s)
// later; rebound's rescue restarts its clocks the same way (end + node
// grace period). DEFECT: the peering planner restarts the prune grace at
// the thaw with PruneGracePeriod (40 s by default), not the node grace
// period, so node-8 and node-9 leave the BGP mesh at thaw + 40 s, 5 s
// before they are back: their pods lose their routes, which upstream's
// full mesh never does.
func TestStallEndSlowNodesAttack(t *testing.T) {
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("node-%d", i))
	}
	down := t0.Add(-2 * time.Minute)
	cut := down.Add(-50 * time.Second)
	st := State{Nodes: members(names...)}

	// The stall: every node NotReady, every Lease stale.
	var nodes []Node
	for i, n := range names {
		nodes = append(nodes, notReady(n, i+1, down))
	}
	res := Plan(Input{Nodes: nodes, Leases: stallLeases(t0, cut, names, nil), State: st}, t0)
	if !res.Frozen {
		t.Fatalf("the stall: not frozen (%v)", res.PeerNames())
	}

	// The end: 8 nodes back, their Leases renewing.
	end := t0.Add(30 * time.Second)
	for i := range 8 {
		nodes[i] = ready(names[i], i+1, end)
	}
	back := names[:8]
	slow := names[8:]
	res = Plan(Input{Nodes: nodes, Leases: stallLeases(end, cut, slow, back), State: res.State}, end)
	if res.Frozen || res.State.ThawedAt != end {
		t.Fatalf("the end: frozen=%v thawedAt %v, want thawed at %v", res.Frozen, res.State.ThawedAt, end)
	}

	// 41 s after the end: node-8 and node-9 not back yet (they are at
	// 45 s), inside kube-controller-manager's node grace period.
	later := end.Add(41 * time.Second)
	res = Plan(Input{Nodes: nodes, Leases: stallLeases(later, cut, slow, back), State: res.State}, later)
	peers := res.PeerNames()
	for _, n := range slow {
		if !slices.Contains(peers, n) {
			t.Errorf("%s left the mesh %s after the stall's end, inside the node grace period 50s (peers %v, changes %v)", n, later.Sub(end), peers, changeNames(res.Changes))
		}
	}
}
