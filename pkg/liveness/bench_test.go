package liveness

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchWitnesses is n nodes, the last lost of them NotReady with their
// Leases stale and their agents' reads from before the loss; every other
// agent's read lists its ring watches and, as a witness, every lost node
// Alive (the worst case: every agent probes every lost node).
func benchWitnesses(n, lost int, witnesses bool) Input {
	in := Input{Leases: map[string]Lease{}, FirstSeen: map[string]time.Time{}, Distrust: noHold()}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("node-%04d", i))
	}
	lostNames := names[n-lost:]
	for i, name := range names {
		g := &GossipReport{ObservedAt: ago(time.Second), Members: n}
		watched := Watched(name, names, DefaultWatchers)
		if i < n-lost {
			if witnesses {
				watched = append(watched, lostNames...)
			}
			in.Nodes = append(in.Nodes, up(name))
			in.Leases[name] = Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
		} else {
			g.ObservedAt = ago(50 * time.Second)
			in.Nodes = append(in.Nodes, down(name, ago(30*time.Second)))
			in.Leases[name] = Lease{RenewSeen: ago(45 * time.Second), RenewInterval: 10 * time.Second}
		}
		slices.Sort(watched)
		for _, m := range slices.Compact(watched) {
			if m != name {
				g.Watches = append(g.Watches, Watch{Node: m, State: GossipAlive, Since: ago(time.Hour)})
			}
		}
		slices.SortFunc(g.Watches, func(a, b Watch) int { return strings.Compare(a.Node, b.Node) })
		in.Reports = append(in.Reports, Report{Reporter: name, Gossip: g})
	}
	return in
}

// BenchmarkAssessWitnesses: the judge's cost of witnesses beyond the
// ring, at 100 nodes with 90 lost and 1,000 with 100 lost, and the same
// 1,000 without witness reads.
func BenchmarkAssessWitnesses(b *testing.B) {
	for _, c := range []struct {
		n, lost   int
		witnesses bool
	}{{100, 90, true}, {1000, 100, true}, {1000, 100, false}} {
		b.Run(fmt.Sprintf("%d_nodes_%d_lost_witnesses_%v", c.n, c.lost, c.witnesses), func(b *testing.B) {
			in := benchWitnesses(c.n, c.lost, c.witnesses)
			if v := Assess(in, t0).Of(in.Nodes[c.n-1].Name); c.witnesses && v.Verdict != CutOffFromAPI {
				b.Fatalf("%s: %s", v.Verdict, v.Reason)
			}
			b.ResetTimer()
			for b.Loop() {
				Assess(in, t0)
			}
		})
	}
}
