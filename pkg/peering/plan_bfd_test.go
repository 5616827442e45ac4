package peering

import (
	"net/netip"
	"testing"
	"time"
)

// TestPlanGraceCountsFromBFDDown: with BFD, the live reporters lose a dead
// node in a second, well before the API marks it NotReady; the prune grace
// then counts from that moment. Without BFD, or when one reporter has no
// BFD time, it counts from the NotReady transition as before.
func TestPlanGraceCountsFromBFDDown(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	grace := 40 * time.Second
	notReady := now.Add(-10 * time.Second) // NotReady 10 s ago: within grace
	bfdDown := now.Add(-45 * time.Second)  // lost by BFD 45 s ago: past grace
	nodes := []Node{
		{Name: "a", Address: netip.MustParseAddr("10.0.0.1"), Ready: true},
		{Name: "b", Address: netip.MustParseAddr("10.0.0.2"), Ready: true},
		{Name: "x", Address: netip.MustParseAddr("10.0.0.9"), LastTransition: notReady},
	}
	report := func(reporter, bfd string, since time.Time) Report {
		return Report{Reporter: reporter, ObservedAt: now.Add(-time.Second), Established: 1,
			Sessions: []Session{{Peer: "x", State: "Active", Since: since, BFD: bfd}}}
	}
	state := State{Nodes: map[string]NodeState{"a": {InSet: true}, "b": {InSet: true}, "x": {InSet: true}}}
	tests := []struct {
		name    string
		reports []Report
		inSet   bool
	}{
		{"every reporter's BFD lost it 45 s ago: out", []Report{report("a", BFDDown, bfdDown), report("b", BFDDown, bfdDown.Add(time.Second))}, false},
		{"no BFD: the grace counts from NotReady", []Report{report("a", "", bfdDown), report("b", "", bfdDown)}, true},
		{"one reporter without BFD: from NotReady", []Report{report("a", BFDDown, bfdDown), report("b", "", bfdDown)}, true},
		{"BFD down only recently: in grace", []Report{report("a", BFDDown, now.Add(-5*time.Second)), report("b", BFDDown, now.Add(-5*time.Second))}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Plan(Input{Nodes: nodes, Reports: tc.reports, State: state, Config: Config{PruneGracePeriod: grace}}, now)
			in := false
			for _, d := range res.Decisions {
				if d.Name == "x" {
					in = d.InSet
				}
			}
			if in != tc.inSet {
				t.Errorf("x in set = %v, want %v; decisions %+v", in, tc.inSet, res.Decisions)
			}
		})
	}
}
