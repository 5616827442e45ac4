package e2e

import (
	"context"
	"testing"
	"time"

	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// S6: a node flaps Ready/NotReady every 10 s for 2 minutes.
//
// The sandbox's node grace is 5 s (lease 4 s, monitor period 1 s) so that
// a node stopped for 10 s really goes NotReady for several seconds each
// time. The peering controller's PruneGracePeriod is 2 s, shorter than
// those NotReady spells, so the flap damping has work to do: the grace
// doubles with each removal inside the 10 min flap window (2 s, 4 s, 8 s,
// ...) and the flapping node soon stays in the set. The test checks:
//
//   - the flapping node's set changes <= peering.Config.MaxChanges(window),
//     the damping's promise;
//   - the Ready nodes' membership never changes;
//   - the BIRD reloads of a Ready node's agent <= those changes.
const (
	s6Flap      = 10 * time.Second
	s6Duration  = 2 * time.Minute
	s6PruneBase = 2 * time.Second
)

func s6Timings() sandbox.Timings {
	return sandbox.Timings{
		NodeMonitorGracePeriod:   5 * time.Second,
		NodeMonitorPeriod:        time.Second,
		NodeLeaseDuration:        4 * time.Second,
		DefaultTolerationSeconds: 20,
	}
}

// TestS6FlappingNode is not parallel on purpose: `go test` runs it while
// the S4 tests' background halves wait out BIRD's 240 s, instead of after
// them when only two tests may run at once (-parallel defaults to the CPU
// count).
func TestS6FlappingNode(t *testing.T) {
	bins := birdtest.Require(t, bird.Bird16)
	c := startSandbox(t, 3, s6Timings())
	ctx := testContext(t, 8*time.Minute)
	cfg := peering.Config{PruneGracePeriod: s6PruneBase, Evidence: peering.EvidenceOptions{ReportMaxAge: 6 * time.Second}}

	lab := birdLabOnSandbox(ctx, t, c, birdlab.Options{Bins: bins, Nodes: 3, Net: 31, Dir: shortDir(t), Include: true}, "")
	set := startPeeringController(t, c, controller.PeeringOptions{
		Name: "peering-s6", Config: cfg, State: controllerState("rebound-peering-s6"),
	})
	for _, n := range lab.Nodes {
		waitInSet(ctx, t, c, n.Name, true, 30*time.Second)
	}
	// A Ready node's agent and BIRD: its reloads are the reconfigurations.
	stable, flapping := lab.Nodes[0], lab.Nodes[2]
	if err := lab.Start(ctx, stable, false); err != nil {
		t.Fatal(err)
	}
	ag := startAgent(t, c, lab, stable, agent.Options{PeerSet: set, Debounce: 200 * time.Millisecond, StatusInterval: time.Second, ReportInterval: 2 * time.Second})
	poll(ctx, t, 30*time.Second, "the stable node's agent applied the set", func() (bool, string) {
		s := ag.Stats()
		return s.Reloads >= 1, s.LastError
	})

	reloadsBefore := ag.Stats().Reloads
	res, err := scenario.RunS6(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S6Options{
		Node: flapping.Name, Flap: s6Flap, Duration: s6Duration,
		// Settled: the node is in the set again and the stable agent has
		// the whole set.
		Settled: func(ctx context.Context) error {
			waitInSet(ctx, t, c, flapping.Name, true, 30*time.Second)
			poll(ctx, t, 30*time.Second, "the stable agent has the whole set", func() (bool, string) {
				protos, err := stable.Client().Protocols(ctx)
				if err != nil {
					return false, err.Error()
				}
				for _, p := range protos {
					if p.Name == bird.ProtocolName(flapping.Address) {
						return true, ""
					}
				}
				return false, "no protocol for the flapping node"
			})
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	window := res.Window
	changes := len(res.Changes[flapping.Name])
	spells := res.NotReadySpells[flapping.Name]
	others := map[string][]string{}
	for _, n := range lab.Nodes[:2] {
		others[n.Name] = res.Changes[n.Name]
	}
	reloads := ag.Stats().Reloads - reloadsBefore
	promised := cfg.MaxChanges(window)

	metric(t, "s6_not_ready_spells", float64(spells), "count")
	metric(t, "s6_peer_set_changes", float64(changes), "count")
	// The damping's bound is computed from its settings: a CONFIG line.
	config(t, "s6_peer_set_changes_promised_max", float64(promised), "count")
	metric(t, "s6_agent_reloads", float64(reloads), "count")
	t.Logf("%s went NotReady %d times in %s; its membership changed %d times %v (damping promises <= %d); the stable node's BIRD reloaded %d times",
		flapping.Name, spells, window.Round(time.Second), changes, res.Changes[flapping.Name], promised, reloads)

	if spells < 3 {
		t.Errorf("%s went NotReady only %d times: the sandbox did not make it flap, the test proves nothing", flapping.Name, spells)
	}
	if changes > promised {
		t.Errorf("%s changed membership %d times in %s, the damping promises at most %d", flapping.Name, changes, window, promised)
	}
	for name, ch := range others {
		if len(ch) > 0 {
			t.Errorf("Ready node %s changed membership: %v", name, ch)
		}
	}
	if reloads > changes {
		t.Errorf("the stable node's BIRD reloaded %d times for %d set changes", reloads, changes)
	}
}
