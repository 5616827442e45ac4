package liveness

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// gossipWorld is n Ready nodes n0..n(n-1), each gossiping and renewing its
// Lease every 10 s (last seen 1 s ago), with fresh gossip reads that list
// every member each watches as Alive.
type gossipWorld struct {
	nodes  []Node
	leases map[string]Lease
	gossip map[string]*GossipReport
}

func newGossipWorld(n int) *gossipWorld {
	w := &gossipWorld{leases: map[string]Lease{}, gossip: map[string]*GossipReport{}}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	for _, name := range names {
		w.nodes = append(w.nodes, up(name))
		w.leases[name] = Lease{RenewSeen: ago(time.Second), RenewInterval: 10 * time.Second}
		g := &GossipReport{ObservedAt: ago(time.Second), Members: n}
		for _, m := range Watched(name, names, DefaultWatchers) {
			g.Watches = append(g.Watches, Watch{Node: m, State: GossipAlive, Since: ago(time.Hour)})
		}
		w.gossip[name] = g
	}
	return w
}

// say sets what watcher reports of node, as its agent does: a new state
// is seen since now (a second ago).
func (w *gossipWorld) say(watcher, node, state string) {
	g := w.gossip[watcher]
	for i := range g.Watches {
		if g.Watches[i].Node == node {
			if g.Watches[i].State != state {
				g.Watches[i].State, g.Watches[i].Since = state, ago(time.Second)
			}
			return
		}
	}
	g.Watches = append(g.Watches, Watch{Node: node, State: state, Since: ago(time.Second)})
	slices.SortFunc(g.Watches, func(a, b Watch) int { return strings.Compare(a.Node, b.Node) })
}

func (w *gossipWorld) stale(node string) {
	w.leases[node] = Lease{RenewSeen: ago(13 * time.Second), RenewInterval: 10 * time.Second}
}

func (w *gossipWorld) watchers(node string) []string {
	var names []string
	for _, n := range w.nodes {
		names = append(names, n.Name)
	}
	return Watchers(node, names, DefaultWatchers)
}

func (w *gossipWorld) assess() Assessment {
	var rs []Report
	for _, n := range w.nodes {
		if g := w.gossip[n.Name]; g != nil {
			rs = append(rs, Report{Reporter: n.Name, Gossip: g})
		}
	}
	return Assess(Input{Nodes: w.nodes, Reports: rs, Leases: w.leases, FirstSeen: map[string]time.Time{}}, t0)
}

// TestTwoPlanes: a Ready node is Dead early only when both planes say so;
// one row per way a single plane, node, liar or clock could bend it.
func TestTwoPlanes(t *testing.T) {
	const victim = "n3"
	tests := []struct {
		name  string
		setup func(w *gossipWorld)
		want  Verdict
		early bool
		words string
	}{
		{name: "both planes: Lease stale and a quorum of watchers dead", want: Dead, early: true, words: "dead on both planes",
			setup: func(w *gossipWorld) {
				w.stale(victim)
				for _, x := range w.watchers(victim)[:2] {
					w.say(x, victim, GossipDead)
				}
				w.gossip[w.watchers(victim)[2]].Watches = nil // its third watcher has not noticed yet: abstains
			}},
		{name: "Lease stale, gossip alive: cut off from the API, no early action", want: CutOffFromAPI, words: "alive",
			setup: func(w *gossipWorld) { w.stale(victim) }},
		{name: "gossip dead, Lease renewing: the kubelet lives, no action", want: Alive,
			setup: func(w *gossipWorld) {
				for _, x := range w.watchers(victim) {
					w.say(x, victim, GossipDead)
				}
			}},
		{name: "Lease stale, one lone watcher says dead: no quorum", want: Alive, words: "does not corroborate",
			setup: func(w *gossipWorld) {
				w.stale(victim)
				ws := w.watchers(victim)
				w.say(ws[0], victim, GossipDead)
				w.gossip[ws[1]].Watches, w.gossip[ws[2]].Watches = nil, nil
			}},
		{name: "a quorum dead but one watcher alive: the live one vetoes", want: CutOffFromAPI,
			setup: func(w *gossipWorld) {
				w.stale(victim)
				ws := w.watchers(victim)
				w.say(ws[0], victim, GossipDead)
				w.say(ws[1], victim, GossipDead)
			}},
		{name: "liars that do not watch it: their votes are not heard", want: Alive,
			setup: func(w *gossipWorld) {
				w.stale(victim)
				ws := w.watchers(victim)
				for _, n := range w.nodes {
					if n.Name != victim && !slices.Contains(ws, n.Name) {
						w.say(n.Name, victim, GossipDead)
					}
				}
				for _, x := range ws {
					w.gossip[x].Watches = nil
				}
			}},
		{name: "a watcher whose own Lease is stale abstains", want: Alive,
			setup: func(w *gossipWorld) {
				w.stale(victim)
				ws := w.watchers(victim)
				w.say(ws[0], victim, GossipDead)
				w.say(ws[1], victim, GossipDead)
				w.stale(ws[1])
				w.gossip[ws[2]].Watches = nil
			}},
		{name: "stale gossip reads count for nothing", want: Alive,
			setup: func(w *gossipWorld) {
				w.stale(victim)
				for _, x := range w.watchers(victim) {
					w.say(x, victim, GossipDead)
					w.gossip[x].ObservedAt = ago(4 * time.Minute)
				}
			}},
		{name: "watchers' clocks an hour ahead: their reads are ignored", want: Alive,
			setup: func(w *gossipWorld) {
				w.stale(victim)
				for _, x := range w.watchers(victim) {
					w.say(x, victim, GossipDead)
					w.gossip[x].ObservedAt = t0.Add(time.Hour)
				}
			}},
		{name: "the control plane failed: every Lease stale, gossip alive everywhere", want: CutOffFromAPI,
			setup: func(w *gossipWorld) {
				for _, n := range w.nodes {
					w.stale(n.Name)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			tc.setup(w)
			a := w.assess()
			v := a.Of(victim)
			if v.Verdict != tc.want || v.Early != tc.early {
				t.Fatalf("verdict %s (early %v), want %s (early %v): %s", v.Verdict, v.Early, tc.want, tc.early, v.Reason)
			}
			if tc.words != "" && !strings.Contains(v.Reason, tc.words) {
				t.Errorf("reason %q does not say %q", v.Reason, tc.words)
			}
			if tc.early && !v.DetectedAt.Equal(ago(time.Second)) {
				t.Errorf("DetectedAt %s, want the Lease's stale moment %s", v.DetectedAt, ago(time.Second))
			}
			for _, n := range w.nodes {
				if o := a.Of(n.Name); n.Name != victim && o.Verdict == Dead {
					t.Errorf("%s judged Dead too: %s", n.Name, o.Reason)
				}
			}
		})
	}
}

// TestTwoPlanesTooFewWatchers: in a two-node cluster one agent would
// decide alone: no early verdict.
func TestTwoPlanesTooFewWatchers(t *testing.T) {
	w := newGossipWorld(2)
	w.stale("n1")
	w.say("n0", "n1", GossipDead)
	if v := w.assess().Of("n1"); v.Verdict != Alive || !strings.Contains(v.Reason, "fewer than the two") {
		t.Fatalf("verdict %s: %s", v.Verdict, v.Reason)
	}
}

// TestTwoPlanesWakesAtLeaseStale: watchers already say dead while the
// Lease is still fresh: the assessment asks to be run again the moment
// the Lease goes stale.
func TestTwoPlanesWakesAtLeaseStale(t *testing.T) {
	w := newGossipWorld(7)
	for _, x := range w.watchers("n3") {
		w.say(x, "n3", GossipDead)
	}
	a := w.assess()
	staleAt := ago(time.Second).Add(10*time.Second + DefaultLeaseMargin)
	if a.StaleAt.Before(staleAt) || a.StaleAt.After(staleAt.Add(time.Second)) {
		t.Fatalf("StaleAt %s, want just after %s", a.StaleAt, staleAt)
	}
}

// TestNotReadyGossip: the gossip plane corroborates a NotReady node's
// death without BGP only with the Lease plane: a quorum of its watchers
// dead and its Lease stale on rebound's clock. Gossip alone is one plane
// (whoever holds the gossip key can forge it), so without a Lease plane,
// or with the Lease renewing, it confirms nothing. A watcher alive is
// first-hand life either way.
func TestNotReadyGossip(t *testing.T) {
	const victim = "n3"
	allDead := func(w *gossipWorld) {
		for _, x := range w.watchers(victim) {
			w.say(x, victim, GossipDead)
		}
	}
	tests := []struct {
		name  string
		setup func(w *gossipWorld)
		want  Verdict
		words string
	}{
		{name: "a quorum of watchers dead and the Lease stale: Dead on two planes", want: Dead, words: "none alive",
			setup: func(w *gossipWorld) { w.stale(victim); allDead(w) }},
		{name: "a watcher alive: cut off from the API, not dead", want: CutOffFromAPI, words: "alive",
			setup: func(w *gossipWorld) {
				w.stale(victim)
				allDead(w)
				w.say(w.watchers(victim)[0], victim, GossipAlive)
			}},
		{name: "a quorum of watchers dead, no Lease plane: gossip alone is one plane, not Dead", want: Unknown, words: "no Lease plane",
			setup: func(w *gossipWorld) { w.leases = nil; allDead(w) }},
		{name: "a quorum of watchers dead, the node's Lease not tracked: not Dead", want: Unknown, words: "no Lease plane",
			setup: func(w *gossipWorld) { delete(w.leases, victim); allDead(w) }},
		{name: "a quorum of watchers dead, the Lease never seen renewed: not Dead", want: Unknown, words: "no Lease plane",
			setup: func(w *gossipWorld) { w.leases[victim] = Lease{RenewInterval: 10 * time.Second}; allDead(w) }},
		{name: "a quorum of watchers dead, the Lease renewing: the kubelet reaches the API, not Dead", want: Unknown, words: "Lease renewing",
			setup: allDead},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newGossipWorld(7)
			w.nodes[3] = down(victim, ago(time.Minute))
			tc.setup(w)
			v := w.assess().Of(victim)
			if v.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s: %s", v.Verdict, tc.want, v.Reason)
			}
			if v.Early {
				t.Errorf("a NotReady node judged early: %s", v.Reason)
			}
			if (v.Verdict == Dead) == v.DetectedAt.IsZero() {
				t.Errorf("verdict %s with DetectedAt %s: a gossip death is detected when the Lease went stale, and only then", v.Verdict, v.DetectedAt)
			}
			if !strings.Contains(v.Reason, tc.words) {
				t.Errorf("reason %q does not say %q", v.Reason, tc.words)
			}
		})
	}
}

// TestWatchersRing: every member has min(k, n-1) watchers, never itself;
// Watched is its inverse; each member watches k others, so a death is
// written k times whatever the cluster's size.
func TestWatchersRing(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 30, 300} {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("node-%d", i))
		}
		k := DefaultWatchers
		watching := map[string][]string{}
		for _, m := range names {
			ws := Watchers(m, names, k)
			if len(ws) != min(k, n-1) || slices.Contains(ws, m) {
				t.Fatalf("n=%d: Watchers(%s) = %v", n, m, ws)
			}
			for _, w := range ws {
				watching[w] = append(watching[w], m)
			}
		}
		for _, m := range names {
			got, want := Watched(m, names, k), watching[m]
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("n=%d: Watched(%s) = %v, want %v", n, m, got, want)
			}
		}
		// A dead member's watchers do not depend on whether a view still
		// holds it.
		if n > 1 && !slices.Equal(Watchers(names[0], names, k), Watchers(names[0], names[1:], k)) {
			t.Fatalf("n=%d: watchers change when the member leaves the view", n)
		}
	}
}

// TestLeaseTracker: a renewal is a change of renewTime, timed by rebound's
// clock whatever time the kubelet wrote; a first sight counts as one.
func TestLeaseTracker(t *testing.T) {
	var lt LeaseTracker
	kubeletClock := t0.Add(-10 * time.Minute) // ten minutes behind
	lt.Observe("a", kubeletClock, 40*time.Second, t0)
	if l := lt.Leases()["a"]; !l.RenewSeen.Equal(t0) || l.RenewInterval != 10*time.Second {
		t.Fatalf("first sight %+v", l)
	}
	lt.Observe("a", kubeletClock, 40*time.Second, t0.Add(5*time.Second)) // a resync, not a renewal
	if l := lt.Leases()["a"]; !l.RenewSeen.Equal(t0) {
		t.Fatalf("a resync moved RenewSeen to %s", l.RenewSeen)
	}
	lt.Observe("a", kubeletClock.Add(10*time.Second), 40*time.Second, t0.Add(10*time.Second))
	if l := lt.Leases()["a"]; !l.RenewSeen.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("renewal seen at %s", l.RenewSeen)
	}
	lt.Forget("a")
	if _, ok := lt.Leases()["a"]; ok {
		t.Fatal("forgotten Lease still there")
	}
	var none *LeaseTracker
	if none.Leases() != nil {
		t.Fatal("a nil tracker has a Lease plane")
	}
}

// FuzzTwoPlanes: any one agent (watcher or not), writing anything about
// any node at any time, with any Lease age for the victim, never makes a
// node Dead alone, never makes a node with a renewing Lease Dead early,
// and never overrides a watcher that has the node alive. Around it: the
// honest watchers may say Dead or MemberDown, or be missing; a vote may
// be read before the node's loss; the node may be distrusted by the
// history, the process may have just started, other nodes may be
// distrusted. Whatever the mix: never early Dead while the Lease renews,
// never early Dead for a distrusted node, never early while a
// cluster-wide hold stands. Forged addresses cannot be expressed here:
// the controller sees votes, not addresses; a forged address makes
// watchers vote Dead about a live node, which is the liar's and the
// honest-Dead rows' input (the agent's probe at the API's address is
// what refuses it).
func FuzzTwoPlanes(f *testing.F) {
	f.Add("n1", "n3", "Dead", int64(1), int64(13), int64(1), true, false, uint8(0), uint8(0), int64(-1), int64(3600), uint8(0))
	f.Add("n0", "n0", "Dead", int64(-40), int64(60), int64(0), false, false, uint8(0), uint8(0), int64(-1), int64(3600), uint8(0))
	f.Add("n5", "n2", "Alive", int64(4000), int64(2), int64(7), true, false, uint8(0), uint8(0), int64(-1), int64(3600), uint8(0))
	f.Add("n1", "n3", "Dead", int64(1), int64(13), int64(10), false, true, uint8(0), uint8(0), int64(30), int64(3600), uint8(0))
	f.Add("n1", "n3", "MemberDown", int64(1), int64(13), int64(10), false, true, uint8(3), uint8(8), int64(-1), int64(10), uint8(2))
	f.Add("n2", "n3", "Dead", int64(20), int64(13), int64(10), false, true, uint8(0), uint8(0), int64(-1), int64(3600), uint8(1))
	f.Fuzz(func(t *testing.T, liar, about, state string, observedAgo, leaseAgo, renewEvery int64, honestAlive, honestDead bool,
		memberDown, missing uint8, distrustAgo, startedAgo int64, othersDistrusted uint8) {
		w := newGossipWorld(7)
		if honestDead {
			for _, x := range w.watchers(about) {
				w.say(x, about, GossipDead)
			}
		}
		for i, x := range w.watchers(about) {
			if memberDown&(1<<i) != 0 {
				w.say(x, about, GossipMemberDown)
			}
		}
		if g := w.gossip[liar]; g != nil {
			w.say(liar, about, state)
			g.ObservedAt = ago(time.Duration(observedAgo) * time.Second)
		}
		w.leases[about] = Lease{RenewSeen: ago(time.Duration(leaseAgo) * time.Second), RenewInterval: time.Duration(renewEvery) * time.Second}
		if !honestAlive && !honestDead {
			// The honest watchers have not written anything yet.
			for _, x := range w.watchers(about) {
				if x != liar {
					w.gossip[x].Watches = nil
				}
			}
		}
		for i, n := range w.nodes {
			if missing&(1<<i) != 0 && n.Name != liar {
				delete(w.gossip, n.Name)
			}
		}
		history := &Distrust{Since: ago(time.Duration(startedAgo) * time.Second), LastSaid: map[string]time.Time{}}
		if distrustAgo >= 0 {
			history.LastSaid[about] = ago(time.Duration(distrustAgo) * time.Second)
		}
		for i, n := range w.nodes {
			if othersDistrusted&(1<<i) != 0 && n.Name != about {
				history.LastSaid[n.Name] = ago(time.Minute)
			}
		}
		a := w.assessAt(t0, history, Options{})
		for _, n := range w.nodes {
			v := a.Of(n.Name)
			if !honestDead && v.Verdict == Dead {
				t.Fatalf("%s wrote %s of %s and %s is Dead: %s", liar, state, about, n.Name, v.Reason)
			}
			if !v.Early {
				continue
			}
			if !v.LeaseStale {
				t.Fatalf("%s early Dead with its Lease renewing: %s", n.Name, v.Reason)
			}
			if until, ok := a.Distrusted[n.Name]; ok && t0.Before(until) {
				t.Fatalf("%s early Dead while distrusted until %s: %s", n.Name, until, v.Reason)
			}
			if distrustAgo >= 0 && n.Name == about && time.Duration(distrustAgo)*time.Second < DefaultGossipDistrustWindow {
				t.Fatalf("%s early Dead %ds after its watchers said Dead with its Lease renewing: %s", n.Name, distrustAgo, v.Reason)
			}
			if a.Hold.Reason != "" || time.Duration(startedAgo)*time.Second < DefaultGossipDistrustWindow {
				t.Fatalf("%s early Dead while early judgement holds cluster-wide (%+v, started %ds ago): %s", n.Name, a.Hold, startedAgo, v.Reason)
			}
		}
	})
}

// TestWatchersSpreadNeighbours: a member's watchers are spread over the
// ring whatever the naming scheme: names that differ only in their last
// character (node-11, node-12: often rack-mates) hold few of the seats,
// close to what a random draw gives, so one rack's death leaves its
// members watched by others. A plain FNV-1a put 240 of 900 seats there.
func TestWatchersSpreadNeighbours(t *testing.T) {
	schemes := map[string]func(i int) string{
		"node-%d":          func(i int) string { return fmt.Sprintf("node-%d", i) },
		"worker-%03d":      func(i int) string { return fmt.Sprintf("worker-%03d", i) },
		"rack-prefixed":    func(i int) string { return fmt.Sprintf("rack%02d-node%02d", i/10, i%10) },
		"cloud-style":      func(i int) string { return fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/10, 10+i%10) },
		"zone-suffixed":    func(i int) string { return fmt.Sprintf("pool-a-%04d-eu1c", i) },
		"hex-ids (random)": func(i int) string { return fmt.Sprintf("gke-pool-%08x", uint32(i)*2654435761) },
	}
	for name, scheme := range schemes {
		var names []string
		for i := range 300 {
			names = append(names, scheme(i))
		}
		seats, neighbours := 0, 0
		for _, m := range names {
			for _, w := range Watchers(m, names, DefaultWatchers) {
				seats++
				if len(w) == len(m) && w[:len(w)-1] == m[:len(m)-1] {
					neighbours++
				}
			}
		}
		// Each name has at most 9 such neighbours among 299 others: a
		// random draw gives about 3 % of the seats; allow 3 times that.
		if share := float64(neighbours) / float64(seats); share > 0.09 {
			t.Errorf("%s: %d of %d watcher seats go to names differing only in the last character (%.0f%%), want under 9%%", name, neighbours, seats, 100*share)
		}
	}
}

// TestRingOrderMatchesWatchers: the ring Assess sorts once gives every
// node, member or not, the watchers Watchers gives (the agents' rule), for
// every k and ring size.
func TestRingOrderMatchesWatchers(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 40} {
		var members []string
		for i := range n {
			members = append(members, fmt.Sprintf("worker-%03d", i*3))
		}
		r := newRingOrder(members)
		for i := range 3*n + 2 {
			node := fmt.Sprintf("worker-%03d", i) // every third a member
			for k := 1; k <= MaxWatchers+1; k++ {
				got, want := r.watchers(node, k), Watchers(node, members, k)
				if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
					t.Fatalf("n=%d, %s, k=%d: %v, Watchers says %v", n, node, k, got, want)
				}
			}
		}
	}
}
