package peering

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// Safety tables: the set never collapses, liars and stale
// reports cannot keep dead nodes in, duplicate addresses never break the
// render.

func members(names ...string) map[string]NodeState {
	st := map[string]NodeState{}
	for i, n := range names {
		st[n] = NodeState{InSet: true, Address: addr(i + 1)}
	}
	return st
}

func TestPlanFreezes(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	down := func(reporter string, peers ...string) Report {
		r := Report{Reporter: reporter, ObservedAt: t0.Add(-time.Second)}
		for _, p := range peers {
			r.Sessions = append(r.Sessions, Session{Peer: p, State: "Active"})
		}
		return r
	}
	// gossipDown is a gossip-only agent's read: its own probes have
	// peers (sorted) Dead for an hour.
	gossipDown := func(reporter string, peers ...string) Report {
		g := &liveness.GossipReport{ObservedAt: t0.Add(-time.Second), Members: 7}
		for _, p := range peers {
			g.Watches = append(g.Watches, liveness.Watch{Node: p, State: liveness.GossipDead, Since: ago(time.Hour)})
		}
		return Report{Reporter: reporter, Gossip: g}
	}
	// leases is a Lease plane: the stale nodes last renewed an hour ago,
	// the others a second ago, every 10 s.
	leases := func(stale []string, renewing ...string) map[string]liveness.Lease {
		out := map[string]liveness.Lease{}
		for _, n := range stale {
			out[n] = liveness.Lease{RenewSeen: ago(time.Hour), RenewInterval: 10 * time.Second}
		}
		for _, n := range renewing {
			out[n] = liveness.Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
		}
		return out
	}
	// seven: a, b and c Ready, gossiping, and the only gossip reporters,
	// so they are every NotReady node's three watchers; d..g NotReady for
	// an hour, and all three watchers have them Dead.
	seven := []Node{ready("a", 1, ago(time.Hour)), ready("b", 2, ago(time.Hour)), ready("c", 3, ago(time.Hour)),
		notReady("d", 4, ago(time.Hour)), notReady("e", 5, ago(time.Hour)), notReady("f", 6, ago(time.Hour)), notReady("g", 7, ago(time.Hour))}
	sevenGossip := []Report{gossipDown("a", "d", "e", "f", "g"), gossipDown("b", "d", "e", "f", "g"), gossipDown("c", "d", "e", "f", "g")}
	var allDown []Node
	for _, n := range seven {
		allDown = append(allDown, notReady(n.Name, int(n.Address.As4()[3]), ago(time.Hour)))
	}
	tests := []struct {
		name    string
		nodes   []Node
		reports []Report
		leases  map[string]liveness.Lease
		share   float64
		// fresh: the planner starts without state (installed during the
		// incident, or its ConfigMap and the nodes' labels lost).
		fresh      bool
		wantFrozen string // substring of the reason, "" for not frozen
		wantPeers  int
		wantFloor  int
	}{
		{
			name:       "full disruption: every node NotReady for an hour, nobody leaves",
			nodes:      []Node{notReady("a", 1, ago(time.Hour)), notReady("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour))},
			wantFrozen: "full disruption",
			wantPeers:  3,
			wantFloor:  2,
		},
		{
			name: "full disruption even with a Ready-looking report from a dead node",
			nodes: []Node{notReady("a", 1, ago(time.Hour)), notReady("b", 2, ago(time.Hour)),
				notReady("c", 3, ago(time.Hour))},
			reports:    []Report{down("a", "b", "c")},
			wantFrozen: "full disruption",
			wantPeers:  3,
			wantFloor:  2,
		},
		{
			name:       "2 of 3 leave at once unconfirmed: more than half, frozen",
			nodes:      []Node{ready("a", 1, ago(time.Hour)), notReady("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour))},
			wantFrozen: "2 of the 3 members",
			wantPeers:  3,
			wantFloor:  2,
		},
		{
			// Confirmed dead, so no freeze; but the incident's budget lets
			// only 1 of the 3 members leave.
			name:      "2 of 3 confirmed down by the live peer's fresh report: one leaves, the budget holds the other",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), notReady("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour))},
			reports:   []Report{down("a", "b", "c")},
			wantPeers: 2,
			wantFloor: 2,
		},
		{
			name:      "2 of 4 leave: exactly half, allowed",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), ready("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour)), notReady("d", 4, ago(time.Hour))},
			wantPeers: 2,
			wantFloor: 2,
		},
		{
			name:       "a configured share of 0.25: 2 of 4 is too many",
			nodes:      []Node{ready("a", 1, ago(time.Hour)), ready("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour)), notReady("d", 4, ago(time.Hour))},
			share:      0.25,
			wantFrozen: "0.25 share",
			wantPeers:  4,
			wantFloor:  3,
		},
		{
			// The stop switch was pulled through the incident, or rebound
			// installed during it: the first plan the switch allows is
			// long past the prune grace. The members the state does not
			// know are in Calico's default mesh, so their leaves count.
			name:       "fresh state: 2 of 3 NotReady for an hour leave at once unconfirmed: frozen, not pruned in one step",
			nodes:      []Node{ready("a", 1, ago(time.Hour)), notReady("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour))},
			fresh:      true,
			wantFrozen: "2 of the 3 members",
			wantPeers:  3,
			wantFloor:  2,
		},
		{
			name:      "fresh state: 4 of 5 confirmed down by the live peer's report: the incident's budget lets only 2 leave",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), notReady("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour)), notReady("d", 4, ago(time.Hour)), notReady("e", 5, ago(time.Hour))},
			reports:   []Report{down("a", "b", "c", "d", "e")},
			fresh:     true,
			wantPeers: 3,
			wantFloor: 3,
		},
		{
			name:      "fresh state: 1 of 3 NotReady for an hour leaves, within the share",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), ready("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour))},
			fresh:     true,
			wantPeers: 2,
			wantFloor: 2,
		},
		{
			// A gossip quorum without the Lease plane is one plane, and
			// anyone holding the gossip key can forge it.
			name:       "gossip alone, no Lease plane: 4 of 7 watched Dead is no confirmation: frozen",
			nodes:      seven,
			reports:    sevenGossip,
			wantFrozen: "4 of the 7 members",
			wantPeers:  7,
			wantFloor:  4,
		},
		{
			// Their kubelets reach the API: evidence of life keeps each in
			// (liveness.Rules), so nobody would leave and nothing freezes.
			name:      "gossip Dead but the Leases renewing: evidence of life keeps every node in",
			nodes:     seven,
			reports:   sevenGossip,
			leases:    leases(nil, "a", "b", "c", "d", "e", "f", "g"),
			wantPeers: 7,
			wantFloor: 4,
		},
		{
			name:      "gossip Dead and the Leases stale: two planes confirm; no freeze, the budget lets 3 of 7 leave",
			nodes:     seven,
			reports:   sevenGossip,
			leases:    leases([]string{"d", "e", "f", "g"}, "a", "b", "c"),
			wantPeers: 4,
			wantFloor: 4,
		},
		{
			// A control-plane stall: every Lease stale, every node
			// NotReady; the gossip claims come from nodes in doubt
			// themselves, so nobody votes.
			name:       "full disruption with every Lease stale and gossip claiming deaths: frozen",
			nodes:      allDown,
			reports:    sevenGossip,
			leases:     leases([]string{"a", "b", "c", "d", "e", "f", "g"}),
			wantFrozen: "full disruption",
			wantPeers:  7,
			wantFloor:  4,
		},
		{
			name:       "full disruption with every Lease stale, fresh state: frozen",
			nodes:      allDown,
			reports:    sevenGossip,
			leases:     leases([]string{"a", "b", "c", "d", "e", "f", "g"}),
			fresh:      true,
			wantFrozen: "full disruption",
			wantPeers:  7,
			wantFloor:  4,
		},
		{
			// The Leases see a stall before the Ready flags catch up:
			// 4 of 7 flipped NotReady, the other 3 still Ready in the API,
			// every Lease stale on rebound's clock. Share 1 turns the
			// share rule off: only the Lease plane holds.
			name:       "every Lease stale while the Ready flags catch up: frozen as a stall",
			nodes:      append(append([]Node{}, seven[:3]...), allDown[3:]...),
			leases:     leases([]string{"a", "b", "c", "d", "e", "f", "g"}),
			share:      1,
			wantFrozen: "no node's Lease renews",
			wantPeers:  7,
			wantFloor:  0,
		},
		{
			name:      "share 1 turns the rule off",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), notReady("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour))},
			share:     1,
			wantPeers: 1,
			wantFloor: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			names := []string{}
			for _, n := range tc.nodes {
				names = append(names, n.Name)
			}
			in := Input{Nodes: tc.nodes, Reports: tc.reports, Leases: tc.leases, State: State{Nodes: members(names...)}, Config: Config{MaxLeaveShare: tc.share}}
			if tc.fresh {
				in.State = State{}
			}
			res := Plan(in, t0)
			if got := res.FrozenReason; (tc.wantFrozen == "") != !res.Frozen || !strings.Contains(got, tc.wantFrozen) {
				t.Errorf("frozen = %v %q, want reason with %q", res.Frozen, got, tc.wantFrozen)
			}
			if len(res.Peers) != tc.wantPeers || res.Floor != tc.wantFloor {
				t.Errorf("peers %v floor %d, want %d peers floor %d", res.PeerNames(), res.Floor, tc.wantPeers, tc.wantFloor)
			}
			if res.Frozen {
				if len(res.Changes) != 0 {
					t.Errorf("a frozen set changed: %+v", res.Changes)
				}
				for _, d := range res.Decisions {
					if !d.InSet {
						t.Errorf("%s left a frozen set: %+v", d.Name, d)
					}
				}
			}
			if err := res.PeerSet(1, t0).Validate(); err != nil {
				t.Errorf("the published document is invalid: %v", err)
			}
			checkIdempotent(t, in, t0, res)
		})
	}
}

// TestPlanFullDisruptionManyPasses: the review's reproduction (50 nodes,
// all NotReady, long past the grace): not one removal over an hour of
// passes, and the first Ready node unfreezes the set.
func TestPlanFullDisruptionManyPasses(t *testing.T) {
	var nodes []Node
	var names []string
	for i := range 50 {
		n := notReady(fmt.Sprintf("n%02d", i), i+1, t0)
		nodes = append(nodes, n)
		names = append(names, n.Name)
	}
	st := State{Nodes: members(names...)}
	for m := 0; m <= 60; m++ {
		res := Plan(Input{Nodes: nodes, State: st}, t0.Add(time.Duration(m)*time.Minute))
		if len(res.Peers) != 50 || len(res.Changes) != 0 || !res.Frozen {
			t.Fatalf("minute %d: %d peers, changes %v, frozen %v", m, len(res.Peers), res.Changes, res.Frozen)
		}
		st = res.State
	}
}

func TestPlanLiars(t *testing.T) {
	dead := time.Hour
	nodes := []Node{ready("a", 1, t0.Add(-2*dead)), ready("liar", 2, t0.Add(-2*dead)), notReady("dead", 3, t0.Add(-dead)), ready("d", 4, t0.Add(-2*dead))}
	st := State{Nodes: members("a", "liar", "dead", "d")}
	lie := func(at time.Time) Report {
		return Report{Reporter: "liar", ObservedAt: at, Sessions: []Session{{Peer: "dead", State: "Established", Since: at.Add(-time.Second)}}}
	}
	// While the liar is Ready and refreshes, the dead node stays, and
	// the decision names the liar.
	res := Plan(Input{Nodes: nodes, Reports: []Report{lie(t0)}, State: st}, t0)
	if d := decisionOf(res, "dead"); !d.InSet || d.Reason != InSessionUp || !strings.Contains(d.Message, "liar") {
		t.Fatalf("dead with a fresh claim: %+v", d)
	}
	// Its report ages out: the node leaves.
	later := t0.Add(DefaultReportMaxAge + time.Second)
	res = Plan(Input{Nodes: nodes, Reports: []Report{lie(t0)}, State: st}, later)
	if d := decisionOf(res, "dead"); d.InSet {
		t.Errorf("dead kept by a stale claim: %+v", d)
	}
	// The liar goes NotReady (still writing): the node leaves.
	liarDown := append([]Node{}, nodes...)
	liarDown[1] = notReady("liar", 2, t0.Add(-time.Minute))
	res = Plan(Input{Nodes: liarDown, Reports: []Report{lie(t0)}, State: st}, t0)
	if d := decisionOf(res, "dead"); d.InSet {
		t.Errorf("dead kept by a NotReady reporter: %+v", d)
	}
	// A claim from the future is ignored.
	res = Plan(Input{Nodes: nodes, Reports: []Report{lie(t0.Add(time.Hour))}, State: st}, t0)
	if d := decisionOf(res, "dead"); d.InSet {
		t.Errorf("dead kept by a report from the future: %+v", d)
	}
	// A report that cannot be read at all (BIRD error) says nothing.
	bad := lie(t0)
	bad.Error = "BIRD control socket does not answer"
	res = Plan(Input{Nodes: nodes, Reports: []Report{bad}, State: st}, t0)
	if d := decisionOf(res, "dead"); d.InSet {
		t.Errorf("dead kept by a report with a BIRD error: %+v", d)
	}
}

// TestPlanDuplicateAddresses: a node that claims another's address can
// keep nobody Ready out of the mesh; NotReady claimants that are not the
// incumbent are left out; the document stays valid.
func TestPlanDuplicateAddresses(t *testing.T) {
	same := netip.MustParseAddr("10.0.0.9")
	a, b, c := ready("a", 1, t0), ready("b", 2, t0), ready("c", 3, t0)
	a.Address, b.Address = same, same
	// Both Ready: both stay (a session to the address reaches whoever
	// holds it), the render stays valid.
	res := Plan(Input{Nodes: []Node{a, b, c}}, t0)
	if got := res.PeerNames(); len(got) != 3 {
		t.Fatalf("peers = %v, want a, b and c", got)
	}
	if err := res.PeerSet(1, t0).Validate(); err != nil {
		t.Fatal(err)
	}
	// An impostor b published with the victim's address first cannot keep
	// a Ready victim a out when it joins.
	st := State{Nodes: map[string]NodeState{"b": {InSet: true, Address: same}, "c": {InSet: true, Address: addr(3)}}}
	res = Plan(Input{Nodes: []Node{a, b, c}, State: st}, t0)
	if d := decisionOf(res, "a"); !d.InSet {
		t.Fatalf("Ready victim a kept out: %+v", d)
	}
	// A NotReady claimant that is not the incumbent is left out.
	bn := notReady("b", 2, t0.Add(-time.Second))
	bn.Address = same
	st = State{Nodes: map[string]NodeState{"a": {InSet: true, Address: same}, "c": {InSet: true, Address: addr(3)}}}
	res = Plan(Input{Nodes: []Node{a, bn, c}, State: st}, t0)
	if d := decisionOf(res, "b"); d.Reason != OutDuplicate || !strings.Contains(d.Message, "a was published with it first") {
		t.Errorf("b: %+v", d)
	}
	if d := decisionOf(res, "a"); !d.InSet {
		t.Errorf("a: %+v", d)
	}
	// A frozen set never keeps a conflicting NotReady non-incumbent.
	an, bn2, cn := notReady("a", 1, t0.Add(-time.Hour)), notReady("b", 2, t0.Add(-time.Hour)), notReady("c", 3, t0.Add(-time.Hour))
	an.Address, bn2.Address = same, same
	res = Plan(Input{Nodes: []Node{an, bn2, cn}, State: State{Nodes: map[string]NodeState{"a": {InSet: true}, "b": {InSet: true}, "c": {InSet: true}}}}, t0)
	if !res.Frozen || len(res.Peers) != 1 {
		t.Errorf("frozen with conflicting members: frozen %v peers %v", res.Frozen, res.PeerNames())
	}
}

func decisionOf(r Result, name string) Decision {
	for _, d := range r.Decisions {
		if d.Name == name {
			return d
		}
	}
	return Decision{}
}
