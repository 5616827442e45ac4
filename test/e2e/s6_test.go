package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"rebound/internal/agent"
	"rebound/internal/birdlab"
	"rebound/internal/birdtest"
	"rebound/internal/controller"
	"rebound/internal/sandbox"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
	"rebound/pkg/peering/kube"
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

// s6Recorder counts, per node, changes of the in-set label, and the
// flapping node's NotReady spells, from an informer on the nodes.
type s6Recorder struct {
	mu        sync.Mutex
	changes   map[string][]string // node -> label values it changed to
	notReady  map[string]int      // node -> Ready->NotReady transitions
	recording bool
}

func (r *s6Recorder) update(oldObj, newObj any) {
	o, n := oldObj.(*corev1.Node), newObj.(*corev1.Node)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.recording {
		return
	}
	if ov, nv := o.Labels[peering.LabelInSet], n.Labels[peering.LabelInSet]; ov != nv {
		r.changes[n.Name] = append(r.changes[n.Name], nv)
	}
	or, _ := kube.Ready(o)
	nr, _ := kube.Ready(n)
	if or && !nr {
		r.notReady[n.Name]++
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

	lab, err := birdlab.New(birdlab.Options{
		Bins: bins, Nodes: 3, Net: 31, Dir: shortDir(t), Include: true,
		NodeName: func(i int) string { return c.NodeNames[i] },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, n := range lab.Nodes {
		annotateBGP(ctx, t, c, n, "")
	}
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

	rec := &s6Recorder{changes: map[string][]string{}, notReady: map[string]int{}}
	factory := informers.NewSharedInformerFactory(c.Client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: rec.update}); err != nil {
		t.Fatal(err)
	}
	stopInf := make(chan struct{})
	t.Cleanup(func() { close(stopInf); factory.Shutdown() })
	factory.Start(stopInf)
	factory.WaitForCacheSync(stopInf)
	rec.mu.Lock()
	rec.recording = true
	rec.mu.Unlock()
	reloadsBefore := ag.Stats().Reloads

	// Flap: 10 s stopped, 10 s running, for 2 minutes.
	start := time.Now()
	for time.Since(start) < s6Duration {
		if err := c.StopNode(ctx, flapping.Name); err != nil {
			t.Fatal(err)
		}
		s6Wait(ctx, t, s6Flap)
		if err := c.StartNode(ctx, flapping.Name); err != nil {
			t.Fatal(err)
		}
		s6Wait(ctx, t, s6Flap)
	}
	// Settle: the node is Ready and in the set, the agent caught up.
	if err := c.WaitNodeReady(ctx, flapping.Name, true, time.Minute); err != nil {
		t.Fatal(err)
	}
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
	window := time.Since(start)

	rec.mu.Lock()
	changes := len(rec.changes[flapping.Name])
	spells := rec.notReady[flapping.Name]
	others := map[string][]string{}
	for _, n := range lab.Nodes[:2] {
		others[n.Name] = rec.changes[n.Name]
	}
	rec.mu.Unlock()
	reloads := ag.Stats().Reloads - reloadsBefore
	promised := cfg.MaxChanges(window)

	metric(t, "s6_not_ready_spells", float64(spells), "count")
	metric(t, "s6_peer_set_changes", float64(changes), "count")
	metric(t, "s6_peer_set_changes_promised_max", float64(promised), "count")
	metric(t, "s6_agent_reloads", float64(reloads), "count")
	t.Logf("%s went NotReady %d times in %s; its membership changed %d times %v (damping promises <= %d); the stable node's BIRD reloaded %d times",
		flapping.Name, spells, window.Round(time.Second), changes, rec.changes[flapping.Name], promised, reloads)

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

// s6Wait waits d: the scenario's own rhythm, not a wait for a condition.
func s6Wait(ctx context.Context, t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(d):
	}
}
