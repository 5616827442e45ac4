package liveness

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// partitioned is the S10 and S16 shape: node-0 Ready, its Lease seen
// renewing 1 s ago; node-1 to node-(n-1) NotReady since 30 s ago on
// rebound's clock, their Leases last renewed 45 s ago (stale), their
// agents cut off from the API with them: their last gossip reads were
// written 50 s ago, before the loss, and are still within the report max
// age, so they are on the ring and most of a node's ring watchers are
// cut off with it. node-0's agent still writes: its read, 1 s old, has
// every other node Alive by its own probes.
func partitioned(n int) Input {
	in := Input{Leases: map[string]Lease{}, FirstSeen: map[string]time.Time{}, Distrust: noHold()}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("node-%d", i))
	}
	for i, name := range names {
		g := &GossipReport{ObservedAt: ago(50 * time.Second), Members: n}
		for _, m := range names {
			if m != name {
				g.Watches = append(g.Watches, Watch{Node: m, State: GossipAlive, Since: ago(time.Hour)})
			}
		}
		if i == 0 {
			in.Nodes = append(in.Nodes, up(name))
			in.Leases[name] = Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
			in.FirstSeen[name] = ago(time.Hour)
			g.ObservedAt = ago(time.Second)
		} else {
			in.Nodes = append(in.Nodes, down(name, ago(30*time.Second)))
			in.Leases[name] = Lease{RenewSeen: ago(45 * time.Second), RenewInterval: 10 * time.Second}
			in.FirstSeen[name] = ago(30 * time.Second)
		}
		in.Reports = append(in.Reports, Report{Reporter: name, Gossip: g})
	}
	return in
}

func names(in Input) []string {
	var out []string
	for _, n := range in.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// TestWitnessesBeyondTheRing: an Alive read, after the loss, by a
// reporter that reaches the API is first-hand life whether or not it is
// one of the node's ring watchers; a death still needs a quorum of the
// ring watchers.
func TestWitnessesBeyondTheRing(t *testing.T) {
	t.Run("S16: node-0 alone reaches the API and has all five Alive: all CutOffFromAPI", func(t *testing.T) {
		in := partitioned(6)
		a := Assess(in, t0)
		for _, name := range names(in)[1:] {
			v := a.Of(name)
			if v.Verdict != CutOffFromAPI {
				t.Errorf("%s: %s, want CutOffFromAPI (node-0 has it Alive after its loss): %s", name, v.Verdict, v.Reason)
			}
			if why, alive := v.EvidenceOfLife(); !alive || !strings.Contains(why, "node-0") {
				t.Errorf("%s: evidence of life %v %q, want node-0's read", name, alive, why)
			}
			if v.DeadEarly() {
				t.Errorf("%s markable", name)
			}
		}
	})
	t.Run("S10: the cut-off node node-0 does not watch on the ring is CutOffFromAPI through node-0's witness read", func(t *testing.T) {
		in := partitioned(5)
		ring := names(in)
		var unwatched string
		for _, name := range ring[1:] {
			if !slices.Contains(Watchers(name, ring, DefaultWatchers), "node-0") {
				unwatched = name
			}
		}
		if unwatched == "" {
			t.Fatal("setup: node-0 watches every node on the ring")
		}
		v := Assess(in, t0).Of(unwatched)
		if v.Verdict != CutOffFromAPI || v.GossipWitnesses != 1 || v.GossipUp != 0 {
			t.Fatalf("%s: %s (witnesses %d, ring watchers alive %d), want CutOffFromAPI by one witness: %s", unwatched, v.Verdict, v.GossipWitnesses, v.GossipUp, v.Reason)
		}
		if !strings.Contains(v.Reason, "witness that reaches the API") {
			t.Errorf("reason does not name the witness: %s", v.Reason)
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(in *Input)
	}{
		{name: "a witness whose own Lease is stale does not count", setup: func(in *Input) {
			in.Leases["node-0"] = Lease{RenewSeen: ago(20 * time.Second), RenewInterval: 10 * time.Second}
		}},
		{name: "a witness whose Lease is a first sight (a restart) does not count", setup: func(in *Input) {
			in.Leases["node-0"] = Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second, FirstSight: true}
		}},
		{name: "a witness NotReady in the API does not count", setup: func(in *Input) {
			in.Nodes[0] = down("node-0", ago(time.Minute))
		}},
		{name: "a witness read from before the loss does not count", setup: func(in *Input) {
			in.Reports[0].Gossip.ObservedAt = ago(40 * time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := partitioned(6)
			tc.setup(&in)
			a := Assess(in, t0)
			judged := 0
			for _, name := range names(in)[1:] {
				v := a.Of(name)
				if v.GossipWitnesses != 0 {
					t.Errorf("%s: %d witnesses: %s", name, v.GossipWitnesses, v.Reason)
				}
				// A ring watcher's Alive is heard whatever its own state
				// (only a liar's keep-in); the rule here is the witness's.
				if slices.Contains(Watchers(name, names(in), DefaultWatchers), "node-0") {
					continue
				}
				judged++
				if v.Verdict == CutOffFromAPI {
					t.Errorf("%s: %s: %s", name, v.Verdict, v.Reason)
				}
			}
			if judged == 0 {
				t.Fatal("setup: node-0 watches every node on the ring")
			}
		})
	}
}

// TestWitnessesNeverVoteDeath: a Ready node whose Lease is stale is Dead
// early only on a quorum of its ring watchers; Dead reads from reporters
// off its ring count for nothing, and an Alive one from a witness vetoes.
func TestWitnessesNeverVoteDeath(t *testing.T) {
	const victim = "n3"
	for _, tc := range []struct {
		name  string
		setup func(w *gossipWorld, ws, others []string)
		want  Verdict
	}{
		{name: "one ring watcher and every non-ring reporter say Dead: short of the ring's quorum", want: Alive,
			setup: func(w *gossipWorld, ws, others []string) {
				w.say(ws[0], victim, GossipDead)
				w.gossip[ws[1]].Watches, w.gossip[ws[2]].Watches = nil, nil
				for _, o := range others {
					w.say(o, victim, GossipDead)
				}
			}},
		{name: "a quorum of ring watchers Dead, one witness off the ring Alive: vetoed, CutOffFromAPI", want: CutOffFromAPI,
			setup: func(w *gossipWorld, ws, others []string) {
				for _, x := range ws {
					w.say(x, victim, GossipDead)
				}
				w.say(others[0], victim, GossipAlive)
			}},
		{name: "control: a quorum of ring watchers Dead: Dead early", want: Dead,
			setup: func(w *gossipWorld, ws, others []string) {
				for _, x := range ws {
					w.say(x, victim, GossipDead)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			w.stale(victim)
			ws := w.watchers(victim)
			var others []string
			for _, n := range w.nodes {
				if n.Name != victim && !slices.Contains(ws, n.Name) {
					others = append(others, n.Name)
				}
			}
			tc.setup(w, ws, others)
			if v := w.assessAt(t0, noHold(), Options{}).Of(victim); v.Verdict != tc.want {
				t.Fatalf("%s, want %s: %s", v.Verdict, tc.want, v.Reason)
			}
		})
	}
}
