package e2e

import (
	"context"
	"testing"
	"time"

	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/fencing"
)

// S17: a stateful pod on a dead node. 5 nodes at upstream's default
// timings; a one-replica StatefulSet with a ReadWriteOnce claim on node-3,
// whose host dies (its Lease stops, its host goes silent, its agent
// stops). Without rebound, in the same run, the pod is still bound to
// node-3 after 360 s. With rebound (the real binary, --lease-plane, a
// policy with fencing.mode Watchdog, and gossiping agents that run
// watchdog self-fencing at the default W and T, their watchdog the lab's
// stand-in), the controller fences node-3 itself and the pod runs
// elsewhere within 60 s of the death; node-3 then comes back on a new boot
// and the taint comes off.

// s17Nodes is the size of S17's sandboxes.
const s17Nodes = 5

// startS17Rebound starts rebound on c for fencing: the controller's
// roles, the detection roles, S17's policy, `rebound controller
// --lease-plane`, and a gossiping agent with fencing on every node, each
// with its own path to the apiserver; it returns once every watchdog is
// armed.
func startS17Rebound(ctx context.Context, t *testing.T, c *sandbox.Cluster) map[string]*scenario.GossipAgent {
	t.Helper()
	cl := installRebound(ctx, t, c)
	_, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-e2e"}, []byte(scenario.S17Policy))
	must(t, err)
	must(t, install.DetectionFor(ctx, cl, "rebound-e2e", sandbox.ReboundUser))
	startController(t, c, "--lease-plane", "--mark-pods-not-ready-early")
	agents, err := scenario.StartGossipAgents(ctx, c, scenario.GossipAgentOptions{Binary: reboundBinary, Fencing: true, OwnAPIPaths: true})
	must(t, err)
	t.Cleanup(func() {
		scenario.StopAll(agents)
		if t.Failed() {
			for _, ag := range agents {
				t.Logf("rebound agent %s log:\n%s", ag.Node, tail(ag.Log, 40))
			}
		}
	})
	must(t, scenario.WaitFencingArmed(ctx, c, agents, 2*time.Minute))
	timing := fencing.DefaultTiming()
	config(t, "s17_watchdog_timeout", timing.Watchdog.Seconds(), "s")
	config(t, "s17_sanction_window", timing.Sanction.Seconds(), "s")
	config(t, "s17_fence_wait", timing.FenceWait(fencing.DefaultFenceMargin).Round(100*time.Millisecond).Seconds(), "s")
	return agents
}

func TestS17StatefulPodFenced(t *testing.T) {
	t.Parallel()
	config(t, "s17_node_monitor_grace", sandbox.DefaultTimings().NodeMonitorGracePeriod.Seconds(), "s")
	t.Run("WithRebound", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 8*time.Minute)
		c := startSandbox(t, s17Nodes, sandbox.DefaultTimings())
		agents := startS17Rebound(ctx, t, c)
		res, err := scenario.RunS17(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S17Options{Agents: agents})
		if err != nil {
			t.Fatal(err)
		}
		metric(t, "s17_stateful_running_elsewhere", res.RunningElsewhere.Seconds(), "s")
		if !res.FencedAt.IsZero() {
			metric(t, "s17_fenced_at", res.FencedAt.Sub(res.DiedAt).Seconds(), "s")
		} else {
			t.Error("the pod ran elsewhere, but no out-of-service taint was seen on node-3")
		}
		metric(t, "s17_taint_removed_after_return", res.TaintRemoved.Seconds(), "s")
		if res.RunningElsewhere > 60*time.Second {
			t.Errorf("the stateful pod ran elsewhere %s after node-3's death, want within 60 s", res.RunningElsewhere)
		}
		resets := 0
		for n, a := range agents {
			if n != "node-3" {
				resets += len(a.Resets())
			}
		}
		metricCount(t, "s17_live_nodes_reset", resets)
		if resets != 0 {
			t.Errorf("%d live nodes were reset by their watchdogs, want none", resets)
		}
	})
	t.Run("WithoutRebound", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 10*time.Minute)
		c := startSandbox(t, s17Nodes, sandbox.DefaultTimings())
		res, err := scenario.RunS17(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S17Options{})
		if err != nil {
			t.Fatal(err)
		}
		metric(t, "s17_stateful_without_rebound_unavailable_at_least", res.StillOnNode.Seconds(), "s")
		if res.StillOnNode < 360*time.Second {
			t.Errorf("watched the pod on the dead node for %s, want at least 360 s", res.StillOnNode)
		}
	})
}
