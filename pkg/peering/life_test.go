package peering

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// TestPlanEvidenceOfLife: a NotReady node with evidence of life
// (liveness.NodeVerdict.EvidenceOfLife) stays in the mesh past its prune
// grace, and one that left comes back at once. A kubelet that reports
// NotReady itself (a hung container runtime, PLEG, a CNI config missing for
// a moment) keeps renewing its Lease while BIRD on the node runs: Calico's
// own mesh keeps it, and so must rebound.
func TestPlanEvidenceOfLife(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	renewing := liveness.Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
	stale := liveness.Lease{RenewSeen: ago(3 * time.Minute), RenewInterval: 10 * time.Second}
	names := []string{"a", "b", "c", "d", "e"}
	// gossip: every node but b reports a fresh read saying state of b.
	gossip := func(state string) []Report {
		var rs []Report
		for _, n := range names {
			if n == "b" {
				continue
			}
			rs = append(rs, Report{Reporter: n, Gossip: &liveness.GossipReport{ObservedAt: ago(time.Second), Members: len(names),
				Watches: []liveness.Watch{{Node: "b", State: state, Since: ago(2 * time.Second)}}}})
		}
		return rs
	}
	tests := []struct {
		name      string
		bLease    liveness.Lease
		reports   []Report
		prev      NodeState
		wantIn    bool
		wantAdded bool
		words     string
	}{
		{name: "NotReady by its own kubelet, Lease renewed 1 s ago, no reports: stays in past the prune grace",
			bLease: renewing, prev: inSet(time.Time{}), wantIn: true, words: "kubelet reaches the API"},
		{name: "the same with its gossip member down (MemberDown, no vote): stays in",
			bLease: renewing, reports: gossip(liveness.GossipMemberDown), prev: inSet(time.Time{}), wantIn: true, words: "kubelet reaches the API"},
		{name: "out of the mesh, its Lease renewing again: back in at once",
			bLease: renewing, prev: outOfSet(ago(3*time.Minute), ago(3*time.Minute)), wantIn: true, wantAdded: true},
		{name: "out of the mesh, its Lease stale, its watchers' fresh Alive reads: back in at once",
			bLease: stale, reports: gossip(liveness.GossipAlive), prev: outOfSet(ago(3*time.Minute), ago(3*time.Minute)), wantIn: true, wantAdded: true, words: "Alive"},
		{name: "control: its Lease stale, no reports: leaves past the grace",
			bLease: stale, prev: inSet(time.Time{}), wantIn: false},
		{name: "control: out, its Lease stale, no reports: stays out",
			bLease: stale, prev: outOfSet(ago(3*time.Minute), ago(3*time.Minute)), wantIn: false},
		{name: "control: a first sight of its Lease (a restart) is no evidence: leaves past the grace",
			bLease: liveness.Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second, FirstSight: true}, prev: inSet(time.Time{}), wantIn: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Leases: map[string]liveness.Lease{}, Reports: tc.reports, State: State{Nodes: map[string]NodeState{}}, FirstSeen: map[string]time.Time{}}
			for i, n := range names {
				if n == "b" {
					in.Nodes = append(in.Nodes, notReady(n, i+1, ago(5*time.Minute)))
					in.Leases[n] = tc.bLease
					in.State.Nodes[n] = tc.prev
					in.FirstSeen[n] = ago(5 * time.Minute)
					continue
				}
				in.Nodes = append(in.Nodes, ready(n, i+1, ago(time.Hour)))
				in.Leases[n] = renewing
				in.State.Nodes[n] = inSet(time.Time{})
				in.FirstSeen[n] = ago(time.Hour)
			}
			res := Plan(in, t0)
			d := decisionOf(res, "b")
			if d.InSet != tc.wantIn {
				t.Fatalf("b in the set %v, want %v: %s %s", d.InSet, tc.wantIn, d.Reason, d.Message)
			}
			if tc.wantIn && d.Reason != InSessionUp {
				t.Errorf("reason %s, want %s: %s", d.Reason, InSessionUp, d.Message)
			}
			if tc.words != "" && !strings.Contains(d.Message, tc.words) {
				t.Errorf("message %q does not say %q", d.Message, tc.words)
			}
			wantChanges := []string(nil)
			if tc.wantAdded {
				wantChanges = []string{"+b"}
			}
			if tc.prev.InSet && !tc.wantIn {
				wantChanges = []string{"-b"}
			}
			if got := changeNames(res.Changes); !reflect.DeepEqual(got, wantChanges) {
				t.Errorf("changes %v, want %v", got, wantChanges)
			}
			if got := res.PeerNames(); slices.Contains(got, "b") != tc.wantIn {
				t.Errorf("published peers %v", got)
			}
			checkIdempotent(t, in, t0, res)
		})
	}
}

// TestPlanS16OneNodeReachesTheAPI: node-0's kubelet and agent still reach
// the API; the kubelets and agents of node-1 to node-5 lost it together,
// long past the prune grace, while gossip among all agents works. node-0's
// agent reads every other node Alive after the loss; the others' last
// reads predate it. Every worker stays in, on evidence of life (not only
// because a leave of five would freeze the set).
func TestPlanS16OneNodeReachesTheAPI(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	var names []string
	for i := range 6 {
		names = append(names, "node-"+string(rune('0'+i)))
	}
	in := Input{Leases: map[string]liveness.Lease{}, FirstSeen: map[string]time.Time{}, State: State{Nodes: map[string]NodeState{}}}
	for i, name := range names {
		// The workers' last reads: written before their Leases' last
		// renewal was due again (the loss), within the report max age.
		g := &liveness.GossipReport{ObservedAt: ago(100 * time.Second), Members: len(names)}
		for _, m := range names {
			if m != name {
				g.Watches = append(g.Watches, liveness.Watch{Node: m, State: liveness.GossipAlive, Since: ago(time.Hour)})
			}
		}
		in.State.Nodes[name] = inSet(time.Time{})
		if i == 0 {
			in.Nodes = append(in.Nodes, ready(name, i+1, ago(time.Hour)))
			in.Leases[name] = liveness.Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
			in.FirstSeen[name] = ago(time.Hour)
			g.ObservedAt = ago(time.Second)
		} else {
			in.Nodes = append(in.Nodes, notReady(name, i+1, ago(50*time.Second)))
			in.Leases[name] = liveness.Lease{RenewSeen: ago(95 * time.Second), RenewInterval: 10 * time.Second}
			in.FirstSeen[name] = ago(50 * time.Second)
		}
		in.Reports = append(in.Reports, Report{Reporter: name, Gossip: g})
	}
	res := Plan(in, t0)
	if len(res.Changes) != 0 {
		t.Errorf("changes %v, want none", changeNames(res.Changes))
	}
	for _, name := range names[1:] {
		if d := decisionOf(res, name); !d.InSet || d.Reason != InSessionUp {
			t.Errorf("%s: in %v, %s: %s; want kept on evidence of life (%s)", name, d.InSet, d.Reason, d.Message, InSessionUp)
		}
	}
	checkIdempotent(t, in, t0, res)
}
