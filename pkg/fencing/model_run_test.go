package fencing_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"rebound/pkg/fencing"
)

// modelLength is how long each scenario runs after its first cut: long
// enough for a round to open, fence, and the node to come back.
const modelLength = 4 * time.Minute

type modelResult struct {
	scenarios, fenced, resets int
	violations                []string
}

func (m *modelResult) add(s *sim) {
	m.scenarios++
	m.fenced += s.fenced
	for _, n := range s.nodes {
		m.resets += n.resets
	}
	if len(s.violations) > 0 {
		m.violations = append(m.violations, s.violations[0])
	}
}

// runModel plays every cut of n nodes (exhaustive) or sample of them
// (sample > 0) with flaw f, each with its own seed for the events after it.
func runModel(n int, sample int, f flaw, states map[uint64]struct{}) modelResult {
	var res modelResult
	all := cuts(n)
	r := rand.New(rand.NewPCG(uint64(n), uint64(f)))
	pick := func(k int) topology { return all[k] }
	count := len(all)
	if sample > 0 && sample < count {
		count = sample
		pick = func(int) topology { return all[r.IntN(len(all))] }
	}
	for k := range count {
		s := newSim(n, uint64(n)<<32|uint64(k), f, states)
		s.run(pick(k), modelLength)
		res.add(s)
	}
	return res
}

// TestFencingModel drives the agent's sanction rule and the controller's
// fencing rule, the package's own, through every partition of 3 to 5
// nodes into groups, with and without a one-way link between two groups,
// and every subset of nodes that reaches the API, then a random sequence
// of cuts, heals and events (deaths, agent kills and graceful stops,
// kubelet stops, Lease writes that are not renewals, controller
// failovers, pauses shorter than W, wall clock steps, a node added to the
// member list); 6 and 7 nodes are sampled. No node may ever carry the
// taint while a boot that runs its pods is alive.
func TestFencingModel(t *testing.T) {
	states := map[uint64]struct{}{}
	var total modelResult
	plan := []struct{ n, sample int }{{3, 0}, {4, 0}, {5, 0}, {6, 400}, {7, 200}}
	if testing.Short() {
		plan = []struct{ n, sample int }{{3, 0}, {4, 0}, {5, 600}}
	}
	for _, p := range plan {
		res := runModel(p.n, p.sample, sound, states)
		t.Logf("%d nodes: %d scenarios, %d fenced, %d resets, %d violations", p.n, res.scenarios, res.fenced, res.resets, len(res.violations))
		total.scenarios += res.scenarios
		total.fenced += res.fenced
		total.resets += res.resets
		total.violations = append(total.violations, res.violations...)
	}
	t.Logf("METRIC fencing_model_scenarios=%d count", total.scenarios)
	t.Logf("METRIC fencing_model_states=%d count", len(states))
	t.Logf("METRIC fencing_model_fenced=%d count", total.fenced)
	t.Logf("METRIC fencing_model_violations=%d count", len(total.violations))
	for _, v := range total.violations[:min(5, len(total.violations))] {
		t.Error(v)
	}
	// The model must exercise fencing, or a rule that never fences would
	// pass it.
	if total.fenced == 0 {
		t.Error("no scenario fenced a node: the model does not exercise the rule")
	}
}

// TestFencingModelFindsBrokenRules breaks one part of the rules at a time
// and expects the model to find a node tainted while it runs its pods:
// each part of the rules is needed, and the model is able to tell.
func TestFencingModelFindsBrokenRules(t *testing.T) {
	for _, f := range []flaw{noWait, longPause} {
		t.Run(f.String(), func(t *testing.T) {
			states := map[uint64]struct{}{}
			for _, n := range []int{3, 4, 5} {
				res := runModel(n, 300, f, states)
				if len(res.violations) > 0 {
					t.Logf("%s: %d of %d scenarios of %d nodes violate; first: %s", f, len(res.violations), res.scenarios, n, res.violations[0])
					return
				}
			}
			t.Errorf("%s: the model found no violation", f)
		})
	}
}

func ExampleList_Quorum() {
	fmt.Println(listOf("node-0", "node-1", "node-2", "node-3").Quorum("node-0"))
	// Output: 2
}

func listOf(members ...string) fencing.List { return fencing.List{Number: 1, Members: members} }

// cutOff is a topology in which the nodes in alone reach nobody and
// nobody reaches them, and the API is reachable from api.
func cutOff(n int, alone []int, api []int) topology {
	t := fullTopology(n)
	for _, a := range alone {
		for j := range n {
			if j != a {
				t.reach[a][j], t.reach[j][a] = false, false
			}
		}
	}
	for i := range n {
		t.api[i] = slices.Contains(api, i)
	}
	return t
}

// TestFencingModelRows are scripted scenarios, each a case the rules were
// built against: with the rules whole, no violation; with the flaw the row
// names, the violation it guards against.
func TestFencingModelRows(t *testing.T) {
	rows := []struct {
		name   string
		n      int
		flaw   flaw
		setup  func(s *sim)
		script func(s *sim, step int)
	}{{
		// node-0 resets; its kubelet comes back and renews before its
		// agent's pod starts, then node-0 is cut off from everything. The
		// report in the API is still the armed one of the boot before.
		name: "an armed report of an earlier boot", n: 3, flaw: noBootCheck,
		setup: func(s *sim) { s.agentDelay = func() time.Duration { return time.Minute } },
		script: func(s *sim, step int) {
			switch step {
			case 8:
				s.reset(0)
			case 14:
				s.topo = cutOff(3, []int{0}, []int{1, 2})
			}
		},
	}, {
		// node-0 loses the API and node-3; nodes 1 and 2 keep it fed.
		// node-1's agent restarts and loses node-0 at once: it has heard
		// nothing from node-0 since it started, but node-0 is still
		// sanctioned by what the old process answered.
		name: "a member whose agent restarted", n: 5, flaw: noUptimeCap,
		script: func(s *sim, step int) {
			switch step {
			case 4:
				s.topo = cutOff(5, []int{}, []int{0, 1, 2, 3, 4})
				s.topo.reach[0][3], s.topo.reach[3][0] = false, false
			case 8:
				s.topo.api[0] = false
			case 16:
				s.nodes[1].agentUp = false
				s.nodes[1].agentUpAt = s.now
				s.topo.reach[0][1], s.topo.reach[1][0] = false, false
			}
		},
	}}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for _, f := range []flaw{sound, row.flaw} {
				s := newSim(row.n, 1, f, map[uint64]struct{}{})
				s.alwaysDead = true
				if row.setup != nil {
					row.setup(s)
				}
				s.script = row.script
				s.run(fullTopology(row.n), 3*time.Minute)
				switch {
				case f == sound && len(s.violations) > 0:
					t.Errorf("rules whole: %s", s.violations[0])
				case f != sound && len(s.violations) == 0:
					t.Errorf("%s: no violation; the row does not reach the case it guards against (fenced %d)", f, s.fenced)
				case f != sound:
					t.Logf("%s: %s", f, s.violations[0])
				}
			}
		})
	}
}
