package peering

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// benchInput builds a cluster of n nodes, a tenth of them NotReady at
// various points of their grace period, with the previous state of a
// steady-state controller. With sessions, every Ready node's agent reports
// (compactly, as agents do), the largest input Plan handles.
func benchInput(n int, sessions bool) Input {
	nodes := make([]Node, n)
	state := State{Nodes: make(map[string]NodeState, n)}
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		nodes[i] = Node{
			Name:           name,
			Address:        netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
			Ready:          i%10 != 0,
			LastTransition: t0.Add(-time.Duration(i%120) * time.Second),
			KeepInMesh:     i%97 == 0,
		}
		state.Nodes[name] = NodeState{InSet: true}
	}
	var reports []Report
	if sessions {
		// Every Ready node's agent reports, compactly: its sessions with
		// the NotReady tenth listed (down), the rest counted.
		for i := range nodes {
			if !nodes[i].Ready {
				continue
			}
			var listed []Session
			for j := range nodes {
				if j != i && !nodes[j].Ready {
					listed = append(listed, Session{Peer: nodes[j].Name, State: "Active", Since: t0.Add(-time.Second)})
				}
			}
			reports = append(reports, Report{Reporter: nodes[i].Name, ObservedAt: t0, Established: n - len(listed) - 1, Sessions: listed})
		}
	}
	return Input{Nodes: nodes, Reports: reports, State: state}
}

func BenchmarkPlan1000Nodes(b *testing.B) {
	in := benchInput(1000, false)
	b.ReportAllocs()
	for b.Loop() {
		Plan(in, t0)
	}
}

func BenchmarkPlan1000NodesWithSessions(b *testing.B) {
	in := benchInput(1000, true)
	b.ReportAllocs()
	for b.Loop() {
		Plan(in, t0)
	}
}
