package peering

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// t0 is the fixed "now" of the table tests: tests drive time, never read it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) }

// ready and notReady build nodes whose Ready condition changed at lt.
func ready(name string, i int, lt time.Time) Node {
	return Node{Name: name, Address: addr(i), Ready: true, LastTransition: lt}
}

func notReady(name string, i int, lt time.Time) Node {
	return Node{Name: name, Address: addr(i), LastTransition: lt}
}

func inSet(since time.Time, removals ...time.Time) NodeState {
	return NodeState{InSet: true, Since: since, Removals: removals}
}

func outOfSet(since time.Time, removals ...time.Time) NodeState {
	return NodeState{Since: since, Removals: removals}
}

func TestPlan(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	withLabel := func(n Node) Node { n.KeepInMesh = true; return n }
	// est is a report by reporter of a session with peer in state since.
	est := func(reporter, peer, state string, since time.Time) Report {
		return Report{Reporter: reporter, ObservedAt: t0.Add(-time.Second), Sessions: []Session{{Peer: peer, State: state, Since: since}}}
	}

	tests := []struct {
		name    string
		nodes   []Node
		reports []Report
		state   map[string]NodeState
		config  Config
		// alone: no anchor node. Every other case gets a Ready member
		// "zz" (left out of the comparisons), so that a lone NotReady
		// node is not a full disruption, which freezes the set.
		alone     bool
		wantPeers []string
		wantWhy   map[string]Reason
		// wantChanges lists "+name" for Added and "-name" for Removed.
		wantChanges []string
		wantNext    time.Time
		wantState   map[string]NodeState // checked only when set
	}{
		{
			// Calico's default mesh already holds every node without
			// rebound's label: publishing them first changes nothing.
			name:      "first run: every Ready node is in, no change to the full mesh",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), ready("b", 2, ago(time.Hour))},
			wantPeers: []string{"a", "b"},
			wantWhy:   map[string]Reason{"a": InReady, "b": InReady},
			wantState: map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
		},
		{
			name:      "NotReady within the grace period stays in; next check when the grace ends",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), notReady("b", 2, ago(30*time.Second))},
			state:     map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers: []string{"a", "b"},
			wantWhy:   map[string]Reason{"a": InReady, "b": InGracePeriod},
			wantNext:  t0.Add(10 * time.Second),
		},
		{
			name:        "NotReady exactly the grace period leaves",
			nodes:       []Node{ready("a", 1, ago(time.Hour)), notReady("b", 2, ago(40*time.Second))},
			state:       map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers:   []string{"a"},
			wantWhy:     map[string]Reason{"a": InReady, "b": OutNotReady},
			wantChanges: []string{"-b"},
			wantState:   map[string]NodeState{"a": inSet(time.Time{}), "b": outOfSet(t0, t0)},
		},
		{
			name:      "custom grace period",
			nodes:     []Node{notReady("b", 2, ago(90*time.Second))},
			state:     map[string]NodeState{"b": inSet(time.Time{})},
			config:    Config{PruneGracePeriod: 2 * time.Minute},
			wantPeers: []string{"b"},
			wantWhy:   map[string]Reason{"b": InGracePeriod},
			wantNext:  t0.Add(30 * time.Second),
		},
		{
			// A node the state does not know was in Calico's default mesh:
			// taking it out is a removal, through the freeze and the
			// budget (here 1 of 2 members, within the share), and the
			// damping remembers it.
			name:        "a node NotReady past its grace on first sight leaves the full mesh: a removal",
			nodes:       []Node{notReady("b", 2, ago(time.Hour))},
			wantPeers:   nil,
			wantWhy:     map[string]Reason{"b": OutNotReady},
			wantChanges: []string{"-b"},
			wantState:   map[string]NodeState{"b": outOfSet(t0, t0)},
		},
		{
			name:      "opt-out label keeps a long-dead node in",
			nodes:     []Node{withLabel(notReady("b", 2, ago(time.Hour)))},
			state:     map[string]NodeState{"b": inSet(time.Time{})},
			wantPeers: []string{"b"},
			wantWhy:   map[string]Reason{"b": InKeepLabel},
		},
		{
			name:        "global opt-out keeps everyone, and re-adds pruned nodes",
			nodes:       []Node{notReady("b", 2, ago(time.Hour)), notReady("c", 3, ago(time.Hour))},
			state:       map[string]NodeState{"b": inSet(time.Time{}), "c": outOfSet(ago(time.Minute), ago(time.Minute))},
			config:      Config{Disabled: true},
			wantPeers:   []string{"b", "c"},
			wantWhy:     map[string]Reason{"b": InDisabled, "c": InDisabled},
			wantChanges: []string{"+c"},
		},
		{
			name: "a fresh Established session newer than the NotReady transition, reported by a Ready peer, keeps the node in",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
			},
			reports:   []Report{est("a", "b", "Established", ago(30*time.Minute))},
			state:     map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers: []string{"a", "b"},
			wantWhy:   map[string]Reason{"a": InReady, "b": InSessionUp},
			wantNext:  t0.Add(-time.Second + DefaultReportMaxAge + time.Millisecond),
		},
		{
			// Not proof of life (the hold timer may not have run out), but
			// a live observer's session vetoes the removal: a liar can at
			// most keep a node in, as upstream's full mesh would.
			name: "a session older than the NotReady transition vetoes the removal",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
			},
			reports:   []Report{est("a", "b", "Established", ago(2*time.Hour))},
			state:     map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers: []string{"a", "b"},
			wantWhy:   map[string]Reason{"a": InReady, "b": InSessionUp},
			wantNext:  ago(time.Second).Add(DefaultReportMaxAge + time.Millisecond),
		},
		{
			name: "the node's own report never keeps it in",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
			},
			reports:     []Report{est("b", "a", "Established", ago(time.Minute)), est("b", "b", "Established", ago(time.Minute))},
			state:       map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers:   []string{"a"},
			wantWhy:     map[string]Reason{"a": InReady, "b": OutNotReady},
			wantChanges: []string{"-b"},
		},
		{
			name: "a NotReady reporter's report does not count",
			nodes: []Node{
				notReady("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
				ready("c", 3, ago(time.Hour)),
				ready("d", 4, ago(time.Hour)),
			},
			reports:     []Report{est("a", "b", "Established", ago(time.Minute))},
			state:       map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{}), "c": inSet(time.Time{}), "d": inSet(time.Time{})},
			wantPeers:   []string{"c", "d"},
			wantWhy:     map[string]Reason{"a": OutNotReady, "b": OutNotReady, "c": InReady, "d": InReady},
			wantChanges: []string{"-a", "-b"},
		},
		{
			name: "a stale report does not count",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
			},
			reports:     []Report{{Reporter: "a", ObservedAt: ago(DefaultReportMaxAge + time.Second), Sessions: []Session{{Peer: "b", State: "Established", Since: ago(time.Minute)}}}},
			state:       map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers:   []string{"a"},
			wantWhy:     map[string]Reason{"a": InReady, "b": OutNotReady},
			wantChanges: []string{"-b"},
		},
		{
			name: "a report from the future does not count",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
			},
			reports:     []Report{{Reporter: "a", ObservedAt: t0.Add(DefaultMaxClockSkew + time.Second), Sessions: []Session{{Peer: "b", State: "Established", Since: ago(time.Minute)}}}},
			state:       map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers:   []string{"a"},
			wantWhy:     map[string]Reason{"a": InReady, "b": OutNotReady},
			wantChanges: []string{"-b"},
		},
		{
			name: "a session time from the future is no proof of life, yet the session vetoes",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
			},
			reports:   []Report{est("a", "b", "Established", t0.Add(time.Hour))},
			state:     map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers: []string{"a", "b"},
			wantWhy:   map[string]Reason{"a": InReady, "b": InSessionUp},
			wantNext:  ago(time.Second).Add(DefaultReportMaxAge + time.Millisecond),
		},
		{
			name: "a report read before the NotReady transition does not count",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Minute)),
			},
			reports:     []Report{{Reporter: "a", ObservedAt: ago(2 * time.Minute), Sessions: []Session{{Peer: "b", State: "Established", BFD: BFDUp}}}},
			state:       map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers:   []string{"a"},
			wantWhy:     map[string]Reason{"a": InReady, "b": OutNotReady},
			wantChanges: []string{"-b"},
		},
		{
			name: "BFD up in a fresh report keeps the node in, whatever the session's age",
			nodes: []Node{
				ready("a", 1, ago(time.Hour)),
				notReady("b", 2, ago(time.Hour)),
			},
			reports:   []Report{{Reporter: "a", ObservedAt: t0.Add(-time.Second), Sessions: []Session{{Peer: "b", State: "Established", Since: ago(48 * time.Hour), BFD: BFDUp}}}},
			state:     map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})},
			wantPeers: []string{"a", "b"},
			wantWhy:   map[string]Reason{"a": InReady, "b": InSessionUp},
			wantNext:  t0.Add(-time.Second + DefaultReportMaxAge + time.Millisecond),
		},
		{
			name:        "returning Ready rejoins at once, even right after a removal",
			nodes:       []Node{ready("b", 2, ago(time.Second))},
			state:       map[string]NodeState{"b": outOfSet(ago(2*time.Second), ago(2*time.Second))},
			wantPeers:   []string{"b"},
			wantWhy:     map[string]Reason{"b": InReady},
			wantChanges: []string{"+b"},
			wantState:   map[string]NodeState{"b": inSet(t0, ago(2*time.Second))},
		},
		{
			name:      "a pruned node that stays NotReady stays out without a change",
			nodes:     []Node{notReady("b", 2, ago(time.Hour))},
			state:     map[string]NodeState{"b": outOfSet(ago(time.Minute), ago(time.Minute))},
			wantPeers: nil,
			wantWhy:   map[string]Reason{"b": OutNotReady},
		},
		{
			name: "after a rejoin the streak counts from the rejoin, with a doubled grace",
			// Removed 3 min ago, re-added 70 s ago; the API's transition
			// time is older than the rejoin (a missed Ready interval).
			nodes:     []Node{notReady("b", 2, ago(10*time.Minute))},
			state:     map[string]NodeState{"b": inSet(ago(70*time.Second), ago(3*time.Minute))},
			wantPeers: []string{"b"},
			wantWhy:   map[string]Reason{"b": InGracePeriod},
			wantNext:  t0.Add(10 * time.Second), // 70 s of the 80 s grace
		},
		{
			name: "a removal leaving the flap window brings the next check forward",
			// Two removals: grace 160 s. NotReady for 100 s. The older
			// removal ages out in 10 s, then the grace is 80 s, already over.
			nodes:     []Node{notReady("b", 2, ago(100*time.Second))},
			state:     map[string]NodeState{"b": inSet(ago(5*time.Minute), ago(9*time.Minute+50*time.Second), ago(6*time.Minute))},
			wantPeers: []string{"b"},
			wantWhy:   map[string]Reason{"b": InGracePeriod},
			wantNext:  t0.Add(10 * time.Second),
		},
		{
			name:        "removals older than the flap window are forgotten",
			nodes:       []Node{notReady("b", 2, ago(41*time.Second))},
			state:       map[string]NodeState{"b": inSet(ago(11*time.Minute), ago(11*time.Minute), ago(12*time.Minute))},
			wantPeers:   nil,
			wantWhy:     map[string]Reason{"b": OutNotReady},
			wantChanges: []string{"-b"},
			wantState:   map[string]NodeState{"b": outOfSet(t0, t0)},
		},
		{
			name:        "a deleted node leaves at once and its removal is remembered",
			nodes:       []Node{ready("a", 1, ago(time.Hour))},
			state:       map[string]NodeState{"a": inSet(time.Time{}), "gone": inSet(time.Time{})},
			wantPeers:   []string{"a"},
			wantWhy:     map[string]Reason{"a": InReady, "gone": OutDeleted},
			wantChanges: []string{"-gone"},
			wantState:   map[string]NodeState{"a": inSet(time.Time{}), "gone": outOfSet(t0, t0)},
		},
		{
			name:      "a deleted node that was out and has no recent removal is forgotten",
			nodes:     []Node{ready("a", 1, ago(time.Hour))},
			state:     map[string]NodeState{"a": inSet(time.Time{}), "gone": outOfSet(ago(time.Hour), ago(time.Hour))},
			wantPeers: []string{"a"},
			wantWhy:   map[string]Reason{"a": InReady},
			wantState: map[string]NodeState{"a": inSet(time.Time{})},
		},
		{
			name:        "a node without a BGP address is never a peer",
			nodes:       []Node{{Name: "x", Ready: true}, withLabel(Node{Name: "y"})},
			wantPeers:   nil,
			wantWhy:     map[string]Reason{"x": OutNoAddress, "y": OutNoAddress},
			wantChanges: nil,
		},
		{
			name:      "no transition time: the grace counts from first sight",
			nodes:     []Node{{Name: "b", Address: addr(2)}},
			wantPeers: []string{"b"},
			wantWhy:   map[string]Reason{"b": InGracePeriod},
			// First sight of a node in its grace keeps it in the full
			// mesh: no change.
			wantNext:  t0.Add(40 * time.Second),
			wantState: map[string]NodeState{"b": inSet(t0)},
		},
		{
			name:      "duplicate names: the first wins",
			nodes:     []Node{ready("a", 1, ago(time.Hour)), notReady("a", 9, ago(time.Hour))},
			wantPeers: []string{"a"},
			wantWhy:   map[string]Reason{"a": InReady},
			wantState: map[string]NodeState{"a": inSet(time.Time{})},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Nodes: tc.nodes, Reports: tc.reports, State: State{Nodes: tc.state}, Config: tc.config}
			if !tc.alone {
				in.Nodes = append(append([]Node{}, tc.nodes...), ready("zz", 200, ago(time.Hour)))
				in.State.Nodes = map[string]NodeState{"zz": {InSet: true, Address: addr(200)}}
				for k, v := range tc.state {
					in.State.Nodes[k] = v
				}
			}
			res := withoutAnchor(Plan(in, t0))

			if got := res.PeerNames(); !reflect.DeepEqual(got, tc.wantPeers) && (len(got) > 0 || len(tc.wantPeers) > 0) {
				t.Errorf("peers = %v, want %v", got, tc.wantPeers)
			}
			gotWhy := map[string]Reason{}
			for _, d := range res.Decisions {
				gotWhy[d.Name] = d.Reason
				if d.InSet != d.Reason.In() {
					t.Errorf("decision %s: InSet=%v but reason %s", d.Name, d.InSet, d.Reason)
				}
				if d.Message == "" {
					t.Errorf("decision %s: empty message", d.Name)
				}
			}
			if !reflect.DeepEqual(gotWhy, tc.wantWhy) {
				t.Errorf("reasons = %v, want %v", gotWhy, tc.wantWhy)
			}
			if got := changeNames(res.Changes); !reflect.DeepEqual(got, tc.wantChanges) {
				t.Errorf("changes = %v, want %v", got, tc.wantChanges)
			}
			if !res.NextCheck.Equal(tc.wantNext) {
				t.Errorf("NextCheck = %v, want %v", res.NextCheck, tc.wantNext)
			}
			if tc.wantState != nil && !reflect.DeepEqual(withoutAddresses(res.State.Nodes), tc.wantState) {
				t.Errorf("state = %+v, want %+v", res.State.Nodes, tc.wantState)
			}
			checkIdempotent(t, in, t0, Plan(in, t0))
		})
	}
}

// withoutAddresses drops the published addresses from a state, for tables
// that check only membership and history.
func withoutAddresses(st map[string]NodeState) map[string]NodeState {
	out := make(map[string]NodeState, len(st))
	for k, v := range st {
		v.Address = netip.Addr{}
		out[k] = v
	}
	return out
}

// withoutAnchor drops the anchor node "zz" from a result.
func withoutAnchor(r Result) Result {
	var peers []Peer
	for _, p := range r.Peers {
		if p.Name != "zz" {
			peers = append(peers, p)
		}
	}
	r.Peers = peers
	var ds []Decision
	for _, d := range r.Decisions {
		if d.Name != "zz" {
			ds = append(ds, d)
		}
	}
	r.Decisions = ds
	var cs []Change
	for _, c := range r.Changes {
		if c.Name != "zz" {
			cs = append(cs, c)
		}
	}
	r.Changes = cs
	st := State{Nodes: map[string]NodeState{}}
	for k, v := range r.State.Nodes {
		if k != "zz" {
			st.Nodes[k] = v
		}
	}
	r.State = st
	return r
}

func changeNames(cs []Change) []string {
	var out []string
	for _, c := range cs {
		sign := "+"
		if c.Kind == Removed {
			sign = "-"
		}
		out = append(out, sign+c.Name)
	}
	return out
}

// checkIdempotent proves the two halves of "level-triggered": the same input
// gives the same result, and re-planning from the published state with the
// same nodes at the same time changes nothing.
func checkIdempotent(t *testing.T, in Input, now time.Time, first Result) {
	t.Helper()
	if again := Plan(in, now); !reflect.DeepEqual(again, first) {
		t.Fatalf("Plan is not deterministic:\nfirst  %+v\nsecond %+v", first, again)
	}
	in.State = first.State
	replan := Plan(in, now)
	if len(replan.Changes) != 0 {
		t.Fatalf("re-planning from the published state changed the set: %+v", replan.Changes)
	}
	if !reflect.DeepEqual(replan.Peers, first.Peers) {
		t.Fatalf("re-planning changed the peers: %v, then %v", first.PeerNames(), replan.PeerNames())
	}
	if !reflect.DeepEqual(replan.State, first.State) {
		t.Fatalf("re-planning changed the state:\nfirst  %+v\nsecond %+v", first.State, replan.State)
	}
}

// TestPlanInvariantsRandom checks the safety invariants on many random
// snapshots: they must hold whatever the history was.
func TestPlanInvariantsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := Config{}.WithDefaults()
	for iter := 0; iter < 2000; iter++ {
		var nodes []Node
		state := State{Nodes: map[string]NodeState{}}
		for i := 0; i < 8; i++ {
			n := Node{
				Name:           fmt.Sprintf("n%d", i),
				Address:        addr(i + 1),
				Ready:          rng.IntN(2) == 0,
				LastTransition: t0.Add(-time.Duration(rng.IntN(600)) * time.Second),
				KeepInMesh:     rng.IntN(5) == 0,
			}
			nodes = append(nodes, n)
			if rng.IntN(3) > 0 {
				var removals []time.Time
				for r := rng.IntN(4); r > 0; r-- {
					removals = append(removals, t0.Add(-time.Duration(rng.IntN(900))*time.Second))
				}
				sortTimes(removals)
				state.Nodes[n.Name] = NodeState{InSet: rng.IntN(2) == 0, Since: t0.Add(-time.Duration(rng.IntN(300)) * time.Second), Removals: removals}
			}
		}
		var reports []Report
		for i := 0; i < 8; i++ {
			if rng.IntN(3) == 0 {
				state := []string{"Established", "Active"}[rng.IntN(2)]
				reports = append(reports, Report{
					Reporter: fmt.Sprintf("n%d", i), ObservedAt: t0.Add(-time.Duration(rng.IntN(400)) * time.Second),
					Sessions: []Session{{Peer: fmt.Sprintf("n%d", rng.IntN(8)), State: state, Since: t0.Add(-time.Duration(rng.IntN(900)) * time.Second)}},
				})
			}
		}
		in := Input{Nodes: nodes, Reports: reports, State: state}
		res := Plan(in, t0)
		allNotReady := true
		for _, n := range nodes {
			allNotReady = allNotReady && !n.Ready
		}
		peers := map[string]bool{}
		for _, p := range res.Peers {
			peers[p.Name] = true
		}
		lv := liveness.Assess(liveness.Input{Nodes: livenessNodes(nodes), Reports: reports, Options: cfg.Evidence}, t0)
		byName := map[string]Node{}
		for _, n := range nodes {
			byName[n.Name] = n
		}
		for _, n := range nodes {
			if (n.Ready || n.KeepInMesh) && !peers[n.Name] {
				t.Fatalf("iter %d: %s (Ready=%v, keep=%v) is not in the set", iter, n.Name, n.Ready, n.KeepInMesh)
			}
		}
		for _, c := range res.Changes {
			if c.Kind != Removed {
				continue
			}
			n := byName[c.Name]
			prev := state.Nodes[n.Name]
			start := n.LastTransition
			if prev.Since.After(start) {
				start = prev.Since
			}
			grace := cfg.PruneGrace(len(recentRemovals(prev.Removals, t0, cfg.FlapWindow)))
			if allNotReady || res.Frozen {
				t.Fatalf("iter %d: %s removed from a frozen set (%s)", iter, n.Name, res.FrozenReason)
			}
			if n.Ready || n.KeepInMesh || t0.Sub(start) < grace || lv.Of(n.Name).Veto != "" {
				t.Fatalf("iter %d: %s removed against the rules: node %+v prev %+v grace %v", iter, n.Name, n, prev, grace)
			}
		}
		checkIdempotent(t, in, t0, res)
	}
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

func TestStateJSONRoundTrip(t *testing.T) {
	nodes := []Node{ready("a", 1, t0.Add(-time.Hour)), notReady("b", 2, t0.Add(-time.Hour))}
	in := Input{Nodes: nodes, State: State{Nodes: map[string]NodeState{"a": inSet(time.Time{}), "b": inSet(time.Time{})}}}
	res := Plan(in, t0)
	raw, err := json.Marshal(res.State)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, res.State) {
		t.Fatalf("state changed through JSON:\n%s\n%+v\n%+v", raw, res.State, back)
	}
	want := `{"nodes":{"a":{"inSet":true,"address":"10.0.0.1"},"b":{"inSet":false,"since":"2026-03-01T12:00:00Z","removals":["2026-03-01T12:00:00Z"]}},"incident":{"since":"2026-03-01T12:00:00Z","members":["a","b"],"leaves":["b"]}}`
	if string(raw) != want {
		t.Errorf("state JSON = %s, want %s", raw, want)
	}
	// The whole result is JSON too, for diagnose and --dry-run.
	if _, err := json.Marshal(res); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	err := Config{PruneGracePeriod: -time.Second, MaxPruneGracePeriod: -1}.Validate()
	for _, field := range []string{"pruneGracePeriod", "maxPruneGracePeriod"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
	err = Config{PruneGracePeriod: time.Hour}.Validate()
	if err == nil || !strings.Contains(err.Error(), "flapWindow") {
		t.Errorf("window shorter than grace: error %v does not name flapWindow", err)
	}
}

func TestValidateNodes(t *testing.T) {
	errs := ValidateNodes([]Node{ready("a", 1, t0), ready("a", 2, t0), {Name: "c"}, {Address: addr(4)}})
	if len(errs) != 3 {
		t.Fatalf("got %d errors, want 3: %v", len(errs), errs)
	}
}

func TestKeepInMeshFromLabels(t *testing.T) {
	for value, want := range map[string]bool{"true": true, "false": false, "": false, "True": false} {
		if got := KeepInMeshFromLabels(map[string]string{LabelKeepInMesh: value}); got != want {
			t.Errorf("label value %q: got %v, want %v", value, got, want)
		}
	}
}
