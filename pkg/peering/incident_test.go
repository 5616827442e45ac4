package peering

import (
	"fmt"
	"testing"
	"time"
)

// staggered plays the review's sequence: 1 of 5 nodes Ready; the other
// four turn NotReady one second apart and stay so; the planner runs every
// second for three grace periods, feeding its state back. reports returns
// the agents' reports at each moment. It returns the smallest set seen and
// the floors published.
func staggered(t *testing.T, st State, reports func(now time.Time, nodes []Node) []Report) (minSet int, floors []int, last Result) {
	t.Helper()
	cfg := Config{PruneGracePeriod: 3 * time.Second}
	names := []string{"a", "b", "c", "d", "e"}
	minSet = len(names)
	for s := 0; s <= 12; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		var nodes []Node
		for i, name := range names {
			n := ready(name, i+1, t0.Add(-time.Hour))
			if i > 0 && s >= i {
				n = notReady(name, i+1, t0.Add(time.Duration(i)*time.Second))
			}
			nodes = append(nodes, n)
		}
		last = Plan(Input{Nodes: nodes, Reports: reports(now, nodes), State: st, Config: cfg}, now)
		if len(last.Peers) < last.Floor {
			t.Fatalf("t+%ds: %d peers below the floor %d", s, len(last.Peers), last.Floor)
		}
		minSet = min(minSet, len(last.Peers))
		floors = append(floors, last.Floor)
		st = last.State
	}
	return minSet, floors, last
}

// TestPlanStaggeredLeaves: nodes turning NotReady one at a time cannot
// empty the set in steps each too small to freeze it.
func TestPlanStaggeredLeaves(t *testing.T) {
	allIn := State{Nodes: members("a", "b", "c", "d", "e")}
	noReports := func(time.Time, []Node) []Report { return nil }
	// a's agent still has every session Established (the API alone lost
	// b..e), read a moment ago.
	liveSessions := func(now time.Time, nodes []Node) []Report {
		r := Report{Reporter: "a", ObservedAt: now.Add(-100 * time.Millisecond)}
		for _, n := range nodes[1:] {
			r.Sessions = append(r.Sessions, Session{Peer: n.Name, State: StateEstablished, Since: t0.Add(-time.Hour)})
		}
		return []Report{r}
	}
	t.Run("sessions up throughout: nobody leaves", func(t *testing.T) {
		minSet, _, last := staggered(t, allIn, liveSessions)
		if minSet != 5 {
			t.Fatalf("the set shrank to %d; every session was Established: %v", minSet, last.Decisions)
		}
	})
	for name, st := range map[string]State{"with state": allIn, "without planner state": {}} {
		t.Run("no reports, "+name+": at most the share of the set before the incident", func(t *testing.T) {
			minSet, floors, last := staggered(t, st, noReports)
			if minSet != 3 {
				t.Fatalf("smallest set %d, want 3 (5 less the 0.5 share, rounded down): %v", minSet, last.Decisions)
			}
			for i, f := range floors[4:] {
				if f != 3 {
					t.Fatalf("t+%ds: floor %d, want 3 (the incident's members less its budget), floors %v", i+4, f, floors)
				}
			}
			if got := decisionOf(last, "e").Reason; got != InBudget && got != InFrozen {
				t.Errorf("e: %s, want the budget to be named", got)
			}
		})
	}
	t.Run("the budget ends with the incident", func(t *testing.T) {
		_, _, last := staggered(t, allIn, noReports)
		nodes := []Node{ready("a", 1, t0), ready("b", 2, t0), ready("c", 3, t0), ready("d", 4, t0), ready("e", 5, t0)}
		res := Plan(Input{Nodes: nodes, State: last.State}, t0.Add(time.Minute))
		if res.State.Incident != nil || len(res.Peers) != 5 {
			t.Fatalf("every node Ready: incident %+v, peers %v", res.State.Incident, res.PeerNames())
		}
	})
}

// TestPlanOneReporterCannotPrune: one Ready agent (lying, or seeing a
// one-sided loss) reports BFD Down since an hour ago for four NotReady
// nodes, while the other Ready agents' fresh reports show them
// Established: nobody leaves. Without those vetoes, nobody leaves before
// the grace counted from rebound's clock.
func TestPlanOneReporterCannotPrune(t *testing.T) {
	cfg := Config{PruneGracePeriod: 40 * time.Second}
	nodes := []Node{ready("a", 1, t0.Add(-time.Hour)), ready("b", 2, t0.Add(-time.Hour))}
	for i, name := range []string{"c", "d", "e", "f"} {
		nodes = append(nodes, notReady(name, i+3, t0.Add(-2*time.Second)))
	}
	liar := Report{Reporter: "a", ObservedAt: t0.Add(-time.Second)}
	honest := Report{Reporter: "b", ObservedAt: t0.Add(-time.Second)}
	for _, n := range nodes[2:] {
		liar.Sessions = append(liar.Sessions, Session{Peer: n.Name, State: "Active", BFD: BFDDown, Since: t0.Add(-time.Hour)})
		honest.Sessions = append(honest.Sessions, Session{Peer: n.Name, State: StateEstablished, BFD: BFDUp, Since: t0.Add(-time.Hour)})
	}
	st := State{Nodes: members("a", "b", "c", "d", "e", "f")}
	for s := 0; s <= 120; s += 2 {
		now := t0.Add(time.Duration(s) * time.Second)
		liar.ObservedAt, honest.ObservedAt = now.Add(-time.Second), now.Add(-time.Second)
		res := Plan(Input{Nodes: nodes, Reports: []Report{liar, honest}, State: st, Config: cfg}, now)
		if len(res.Peers) != 6 {
			t.Fatalf("t+%ds: with vetoes, peers = %v: %v", s, res.PeerNames(), res.Decisions)
		}
		st = res.State
	}
	// The honest agent is gone: the liar alone is a quorum of one, but its
	// reported BFD time does not start the clock and the budget holds
	// three of the four.
	st = State{Nodes: members("a", "b", "c", "d", "e", "f")}
	nodes[1].Ready = false
	nodes[1].LastTransition = t0.Add(-2 * time.Second)
	removed := 0
	for s := 0; s <= 120; s += 2 {
		now := t0.Add(time.Duration(s) * time.Second)
		liar.ObservedAt = now.Add(-time.Second)
		res := Plan(Input{Nodes: nodes, Reports: []Report{liar}, State: st, Config: cfg}, now)
		for _, c := range res.Changes {
			if c.Kind == Removed {
				removed++
				if elapsed := now.Sub(t0.Add(-2 * time.Second)); elapsed < cfg.PruneGracePeriod {
					t.Fatalf("%s removed %s after the NotReady transition, within the grace: %s", c.Name, elapsed, c.Message)
				}
			}
		}
		st = res.State
	}
	if removed > 3 {
		t.Fatalf("%d of 6 removed on one reporter's word; the budget allows 3", removed)
	}
}

// TestPlanSkewedKubeletClock: a node whose kubelet wrote its NotReady
// transition ten minutes in the past is not pruned before the grace
// counted from rebound's first sight of it.
func TestPlanSkewedKubeletClock(t *testing.T) {
	cfg := Config{PruneGracePeriod: 40 * time.Second}
	nodes := []Node{ready("a", 1, t0.Add(-time.Hour)), ready("b", 2, t0.Add(-time.Hour)), notReady("c", 3, t0.Add(-10*time.Minute))}
	st := State{Nodes: members("a", "b", "c")}
	firstSeen := map[string]time.Time{"a": t0.Add(-time.Hour), "b": t0.Add(-time.Hour), "c": t0}
	for s := 0; s <= 60; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		res := Plan(Input{Nodes: nodes, FirstSeen: firstSeen, State: st, Config: cfg}, now)
		in := len(res.Peers) == 3
		if want := time.Duration(s)*time.Second < cfg.PruneGracePeriod; in != want {
			t.Fatalf("t+%ds: c in the set = %v, want %v: %s", s, in, want, fmt.Sprint(decisionOf(res, "c")))
		}
		st = res.State
	}
}

// TestPlanBudgetReturnsWithTheNode: of three nodes two die; the budget
// lets one leave and holds the other; when the first returns, its share
// comes back and the other leaves (seed 003's cluster: one of two dead
// ingress nodes returns).
func TestPlanBudgetReturnsWithTheNode(t *testing.T) {
	cfg := Config{PruneGracePeriod: 3 * time.Second}
	a, b, c := ready("a", 1, t0.Add(-time.Hour)), notReady("b", 2, t0), notReady("c", 3, t0)
	st := State{Nodes: members("a", "b", "c")}
	// a's report confirms both down (else two of three leaving at once
	// would freeze the set).
	down := func(at time.Time) []Report {
		return []Report{{Reporter: "a", ObservedAt: at, Sessions: []Session{{Peer: "b", State: "Active"}, {Peer: "c", State: "Active"}}}}
	}
	res := Plan(Input{Nodes: []Node{a, b, c}, Reports: down(t0.Add(4 * time.Second)), State: st, Config: cfg}, t0.Add(5*time.Second))
	if got := res.PeerNames(); len(got) != 2 || decisionOf(res, "c").Reason != InBudget {
		t.Fatalf("peers %v, c %+v: want one of b and c out, c held by the budget", got, decisionOf(res, "c"))
	}
	b = ready("b", 2, t0.Add(10*time.Second))
	res = Plan(Input{Nodes: []Node{a, b, c}, Reports: down(t0.Add(10 * time.Second)), State: res.State, Config: cfg}, t0.Add(11*time.Second))
	if got := res.PeerNames(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("b back: peers %v, want a and b (c's turn to leave): %+v", got, decisionOf(res, "c"))
	}
}
