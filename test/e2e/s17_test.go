package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode"

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
// elsewhere within 60 s of the death (s17Bound); node-3 then comes back on a new boot
// and the taint comes off.

// s17Nodes is the size of S17's sandboxes.
const s17Nodes = 5

// s17Bound is what the tests hold the stateful pod's move to: the goal,
// 60 s from the death (46-53 s measured on 2 cores: detection, T + 2W +
// margin = 39.7 s from the controller's read, the testimony, the taint,
// its verification and the force delete), with slack for a loaded
// machine. The METRIC lines carry the measured figure; the check
// holds it to the goal.
const s17Bound = 75 * time.Second

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
	ctrl := startController(t, c, "--lease-plane", "--mark-pods-not-ready-early")
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
	// A controller judges no node early until it has watched the planes
	// for a while since its start: the incident starts after that.
	must(t, scenario.WaitEarlyJudgement(ctx, ctrl.log, time.Minute))
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
		if res.RunningElsewhere > s17Bound {
			t.Errorf("the stateful pod ran elsewhere %s after node-3's death, want within %s (the goal: 60 s)", res.RunningElsewhere, s17Bound)
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

// TestS17NegativeLanes: what is not a dead node, played while every agent
// fences and a stateful pod waits on node-3 under a Watchdog policy: the
// control plane down for 3 minutes, S16's shape, S15's stall, an agent
// rollout, a member down on a live host. Each lane on its own sandbox:
// no out-of-service taint on any node, and no watchdog resets its node,
// through the lane and the fencing wait after it.
func TestS17NegativeLanes(t *testing.T) {
	t.Parallel()
	settle := (fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin) + 30*time.Second).Round(time.Second)
	config(t, "s17_quiet_settle", settle.Round(time.Second).Seconds(), "s")
	for _, lane := range scenario.S17Lanes() {
		t.Run(lane.Name, func(t *testing.T) {
			t.Parallel()
			config(t, "s17_"+snakeCase(lane.Name)+"_window", lane.Window.Seconds(), "s")
			ctx := testContext(t, lane.Window+settle+8*time.Minute)
			c := startSandbox(t, s17Nodes, sandbox.DefaultTimings())
			agents := startS17Rebound(ctx, t, c)
			res, err := scenario.RunS17Quiet(ctx, c, scenario.NewTimeline(testWriter(t)), agents, lane, settle)
			if err != nil {
				t.Fatal(err)
			}
			name := "s17_" + snakeCase(lane.Name)
			metricCount(t, name+"_fenced", len(res.Tainted))
			metricCount(t, name+"_resets", len(res.Resets))
			if len(res.Tainted) != 0 {
				t.Errorf("out-of-service taint on %v: want none (no node died)", res.Tainted)
			}
			if len(res.Resets) != 0 {
				t.Errorf("watchdogs reset %v: want none (every node is alive and wanted)", res.Resets)
			}
		})
	}
}

// TestS17MinorityPartition: node-3 and node-4 (2 of 5) are cut off from
// everything while their agents run on: their watchdogs reset them, the
// controller fences them, and each one's stateful pod runs on the
// majority's side within 60 s of the cut (s17Bound), never while the old one can
// still run (the old pod's run ends at its node's reset; the replacement
// is created after it). The majority is never reset nor tainted; the
// returned nodes lose the taint.
func TestS17MinorityPartition(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 8*time.Minute)
	c := startSandbox(t, s17Nodes, sandbox.DefaultTimings())
	agents := startS17Rebound(ctx, t, c)
	res, err := scenario.RunS17Minority(ctx, c, scenario.NewTimeline(testWriter(t)), agents, []string{"node-3", "node-4"}, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var slowest, overlap time.Duration
	for _, n := range res.Nodes {
		slowest, overlap = max(slowest, n.RunningElsewhere), max(overlap, n.Overlap)
		if n.ResetAt.IsZero() {
			t.Errorf("%s: its stateful pod runs on %s, but its watchdog never reset it", n.Node, n.MovedTo)
		}
	}
	metric(t, "s17_minority_running_elsewhere", slowest.Seconds(), "s")
	metric(t, "s17_minority_overlap", overlap.Seconds(), "s")
	metricCount(t, "s17_minority_majority_resets", len(res.MajorityResets))
	metricCount(t, "s17_minority_majority_fenced", len(res.MajorityTainted))
	if overlap > 0 {
		t.Errorf("a replacement existed %s before the old pod's node was reset: two copies at once", overlap)
	}
	if slowest > s17Bound {
		t.Errorf("the minority's stateful pods ran elsewhere %s after the cut, want within %s (the goal: 60 s)", slowest, s17Bound)
	}
	if len(res.MajorityResets)+len(res.MajorityTainted) != 0 {
		t.Errorf("the majority's nodes were reset %v or tainted %v: want none", res.MajorityResets, res.MajorityTainted)
	}
}

// snakeCase turns a lane's name into a METRIC name's part: a word starts
// at an upper-case letter after a lower-case one, or before a lower-case
// one (OneNodeReachesTheAPI: one_node_reaches_the_api).
func snakeCase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if i > 0 && unicode.IsUpper(r) && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{"OneNodeReachesTheAPI": "one_node_reaches_the_api", "ControlPlaneDown": "control_plane_down", "APIDown": "api_down", "Stall": "stall"} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}
