package peering

import (
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// TestAttackRestartDropsAliveReads: node b's kubelet lost the API five
// minutes ago (NotReady, Lease stale) while b runs: its gossip watchers
// and witnesses have read it Alive ever since, each rewriting its read
// every report interval (60 s). The controller restarts 45 s before the
// plan: b's Lease is a first sight then, every other Lease has been seen
// renewing since, and the latest Alive reads of b were written 55 s ago,
// minutes after b went NotReady. A restarted judge dates b's loss from
// its own first sight of the Lease and lets no read from before it
// count: b has no evidence of life, its prune grace (counted from the
// restart) runs out, and b, alive, leaves the mesh until the next
// rewrite. Calico's own mesh, and the last process, kept it.
func TestAttackRestartDropsAliveReads(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	names := []string{"a", "b", "c", "d", "e"}
	restart := ago(45 * time.Second)
	for _, tc := range []struct {
		name string
		read time.Duration // the watchers' latest read of b, ago
	}{
		{name: "control: a read written after the restart", read: 5 * time.Second},
		{name: "the latest reads written before the restart, minutes after b's loss", read: 55 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Leases: map[string]liveness.Lease{}, State: State{Nodes: map[string]NodeState{}}, FirstSeen: map[string]time.Time{}}
			for i, n := range names {
				in.State.Nodes[n] = inSet(time.Time{})
				in.FirstSeen[n] = restart
				if n == "b" {
					in.Nodes = append(in.Nodes, notReady(n, i+1, ago(5*time.Minute)))
					in.Leases[n] = liveness.Lease{RenewSeen: restart, RenewInterval: 10 * time.Second, FirstSight: true}
					continue
				}
				in.Nodes = append(in.Nodes, ready(n, i+1, ago(time.Hour)))
				in.Leases[n] = liveness.Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
				in.Reports = append(in.Reports, Report{Reporter: n, Gossip: &liveness.GossipReport{ObservedAt: ago(tc.read), Members: len(names),
					Watches: []liveness.Watch{{Node: "b", State: liveness.GossipAlive, Since: ago(time.Hour)}}}})
			}
			// The restarted controller's history: it began at the restart
			// and first saw each read then, or when it was written since.
			in.Distrust = &liveness.Distrust{Since: restart, DeadSeen: map[string]time.Time{}}
			for _, r := range in.Reports {
				seen := r.Gossip.ObservedAt
				if seen.Before(restart) {
					seen = restart
				}
				in.Distrust.DeadSeen[liveness.ReadSeenKey(r.Reporter, r.Gossip.ObservedAt)] = seen
			}
			res := Plan(in, t0)
			if d := decisionOf(res, "b"); !d.InSet {
				t.Fatalf("b, alive to every reader, left the mesh after a controller restart: %s %s", d.Reason, d.Message)
			}
		})
	}
}

// TestAttackLiarCannotTakeOut: node b is NotReady by its own kubelet's
// report while its Lease renews; every other node's agent (a quorum of its
// watchers and every witness) forges it Dead since before its last
// renewal. A liar can keep a node in, never take one out: b stays in past
// its prune grace. Guard: holds on main.
func TestAttackLiarCannotTakeOut(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	names := []string{"a", "b", "c", "d", "e"}
	in := Input{Leases: map[string]liveness.Lease{}, State: State{Nodes: map[string]NodeState{}}, FirstSeen: map[string]time.Time{}}
	for i, n := range names {
		in.State.Nodes[n] = inSet(time.Time{})
		in.FirstSeen[n] = ago(time.Hour)
		in.Leases[n] = liveness.Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
		if n == "b" {
			in.Nodes = append(in.Nodes, notReady(n, i+1, ago(5*time.Minute)))
			in.FirstSeen[n] = ago(5 * time.Minute)
			continue
		}
		in.Nodes = append(in.Nodes, ready(n, i+1, ago(time.Hour)))
		in.Reports = append(in.Reports, Report{Reporter: n, Gossip: &liveness.GossipReport{ObservedAt: ago(time.Second), Members: len(names),
			Watches: []liveness.Watch{{Node: "b", State: liveness.GossipDead, Since: ago(4 * time.Minute)}}}})
	}
	res := Plan(in, t0)
	if d := decisionOf(res, "b"); !d.InSet {
		t.Fatalf("forged Dead reads took b, whose Lease renews, out of the mesh: %s %s", d.Reason, d.Message)
	}
}
