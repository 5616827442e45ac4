package demo

import (
	"context"
	"fmt"
	"os"

	"rebound/internal/lab/scenario"
)

var s17Info = ScenarioInfo{
	ID:    "S17",
	Title: "a stateful pod on a dead node: fencing proven by the node's own watchdog",
	Description: "5 nodes, each with a gossiping agent that runs watchdog self-fencing (its watchdog the lab's stand-in); a one-replica StatefulSet with a ReadWriteOnce claim runs on node-3, " +
		"which dies outright. Without rebound the pod stays bound to node-3 (taint eviction deletes it, no kubelet confirms). " +
		"With rebound, a policy with fencing.mode Watchdog: the controller proves node-3 cannot be feeding its watchdog (T + 2W + margin after it reads it dead, and a majority of the members heard nothing from it), " +
		"puts node.kubernetes.io/out-of-service on it, and the pod runs elsewhere; node-3 then comes back on a new boot and the taint comes off.",
	Measure: "from node-3's death to the replacement pod's Ready transition (its lastTransitionTime)",
}

// runS17 plays S17 with the real controller and agents: this binary, run
// as `rebound controller` and `rebound sandbox agent` (the agent command
// with the lab's watchdog stand-in).
func runS17(ctx context.Context, env *runEnv) ([]Lane, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("S17 runs this binary as the controller and the agents: %w", err)
	}
	clusters, stop, err := startPair(ctx, env, "S17", 5)
	if err != nil {
		return nil, err
	}
	defer stop()
	agents, stopRebound, err := startTwoPlanes(ctx, clusters[1], bin, scenario.S17Policy, scenario.GossipAgentOptions{Binary: bin, Fencing: true})
	if err != nil {
		return nil, err
	}
	defer stopRebound()
	header(env, "S17: 5 nodes, each agent arming a watchdog; a StatefulSet pod with a ReadWriteOnce volume on node-3, which dies outright.",
		fmt.Sprintf("Without: kube-controller-manager alone, watched for %s. With: rebound fences node-3 itself (fencing.mode Watchdog) and the pod moves.", env.opts.Observe))

	p := newPair(env, "S17", clusters)
	without, withRes, err := scenario.RunS17Pair(ctx, p, agents, env.opts.Observe)
	if err != nil {
		return nil, fmt.Errorf("S17 %w", err)
	}
	lanes := []Lane{{Scenario: "S17", Name: laneWithout}, {Scenario: "S17", Name: laneWith, Rebound: true}}
	for i, r := range []scenario.S17Result{without, withRes} {
		l := &lanes[i]
		tl := []*scenario.Timeline{p.WithoutTimeline, p.WithTimeline}[i]
		l.Events = tl.Events()
		died := tl.At(r.DiedAt)
		moved := r.RunningElsewhere > 0
		l.setRecovery("node-3's death", died, died+r.RunningElsewhere, moved)
		l.Measured = true
		l.S17 = &r
		if moved {
			l.Outcome = fmt.Sprintf("%.1fs (fenced at +%.0fs, T + 2W + margin %.1fs; taint off %.1fs after the return)",
				r.RunningElsewhere.Seconds(), r.FencedAt.Sub(r.DiedAt).Seconds(), r.FenceWait.Seconds(), r.TaintRemoved.Seconds())
		} else {
			l.Outcome = fmt.Sprintf("still on node-3 after %.0fs", r.StillOnNode.Seconds())
		}
	}
	env.metricLines = append(env.metricLines,
		fmt.Sprintf("METRIC s17_stateful_running_elsewhere=%.1f s", withRes.RunningElsewhere.Seconds()),
		fmt.Sprintf("METRIC s17_fenced_at=%.1f s", withRes.FencedAt.Sub(withRes.DiedAt).Seconds()),
		fmt.Sprintf("CONFIG s17_fence_wait=%.1f s", withRes.FenceWait.Seconds()),
		fmt.Sprintf("METRIC s17_taint_removed_after_return=%.1f s", withRes.TaintRemoved.Seconds()),
		fmt.Sprintf("METRIC s17_stateful_without_rebound_unavailable_at_least=%.0f s", without.StillOnNode.Seconds()))
	return lanes, nil
}
