package demo

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scale"
	"rebound/internal/lab/scenario"
)

var s13Info = ScenarioInfo{
	ID:    "S13",
	Title: "a node dies outright: two-plane detection before the node grace",
	Description: "5 nodes, each with a gossiping agent; a critical Deployment's pod and one of a Service's two endpoints run on node-3, " +
		"which dies outright (its Lease stops, its host drops every packet and its agent freezes). Without rebound kube-controller-manager notices at the end of its node grace; " +
		"with rebound, `rebound controller --lease-plane --mark-pods-not-ready-early` and a TwoPlanes policy act once the Lease and the gossip agree.",
	Measure: "from node-3's death to the replacement pod's Ready transition (its lastTransitionTime)",
}

// runS13 plays S13 with the real controller and agents: this binary, run
// as `rebound controller` and `rebound agent --gossip-only`.
func runS13(ctx context.Context, env *runEnv) ([]Lane, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("S13 runs this binary as the controller and the agents: %w", err)
	}
	clusters, stop, err := startPair(ctx, env, "S13", 5)
	if err != nil {
		return nil, err
	}
	defer stop()
	agents, stopRebound, err := startTwoPlanes(ctx, clusters[1], bin, scenario.S13Policy, scenario.GossipAgentOptions{Binary: bin})
	if err != nil {
		return nil, err
	}
	defer stopRebound()
	header(env, "S13: 5 nodes, each with a gossiping agent; a critical pod and a Service endpoint on node-3, which dies outright.",
		fmt.Sprintf("Without: kube-controller-manager alone (node grace %s). With: rebound's Lease and gossip planes, a TwoPlanes policy (0s).", env.timings.NodeMonitorGracePeriod))

	p := newPair(env, "S13", clusters)
	res, err := scenario.RunS13Pair(ctx, p, scenario.S13PairOptions{
		Workload:  scenario.CriticalStandIn("node-3"),
		Peer:      "node-0",
		KillAgent: agents["node-3"].HostDeath,
	})
	if err != nil {
		return nil, fmt.Errorf("S13 %w", err)
	}
	lanes := []Lane{{Scenario: "S13", Name: laneWithout}, {Scenario: "S13", Name: laneWith, Rebound: true}}
	for i, r := range []scenario.S13Result{res.Without, res.With} {
		l := &lanes[i]
		tl := []*scenario.Timeline{p.WithoutTimeline, p.WithTimeline}[i]
		l.Events = tl.Events()
		died := tl.At(r.DiedAt)
		l.setRecovery("node-3's death", died, died+r.ReplacementReady, r.Replaced)
		l.Measured = true
		l.S13 = &r
		l.Outcome = fmt.Sprintf("%.1fs (verdict %.1fs, endpoint off %.1fs)", r.ReplacementReady.Seconds(), r.Verdict.Seconds(), r.EndpointsOff.Seconds())
	}
	lines, err := res.Lines()
	if err != nil {
		return lanes, err
	}
	env.metricLines = append(env.metricLines, lines...)
	return lanes, nil
}

// startTwoPlanes installs rebound on with under policy and starts this
// binary as `rebound controller --lease-plane --mark-pods-not-ready-early`
// and as the gossiping agents (ag); it returns once the controller judges
// early (it holds early judgement for its distrust window after it
// starts: a scenario's death comes after it). stop stops them all.
func startTwoPlanes(ctx context.Context, with *sandbox.Cluster, bin, policy string, ag scenario.GossipAgentOptions) (agents map[string]*scenario.GossipAgent, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	cl, err := scale.Install(ctx, with)
	if err != nil {
		return nil, nil, fmt.Errorf("install rebound in the sandbox: %w", err)
	}
	if err := install.DetectionFor(ctx, cl, "rebound-demo", sandbox.ReboundUser); err != nil {
		return nil, nil, err
	}
	if _, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-demo"}, []byte(policy)); err != nil {
		return nil, nil, err
	}
	ctl, err := scale.StartController(with, bin, "rebound-controller", "--lease-plane", "--mark-pods-not-ready-early")
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { ctl.Signal(syscall.SIGTERM); ctl.Wait() })
	if err := ctl.WaitReady(ctx, time.Minute); err != nil {
		return nil, nil, err
	}
	if agents, err = scenario.StartGossipAgents(ctx, with, ag); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { scenario.StopAll(agents) })
	if ag.Fencing {
		if err := scenario.WaitFencingArmed(ctx, with, agents, 2*time.Minute); err != nil {
			return nil, nil, err
		}
	}
	if err := scenario.WaitEarlyJudgement(ctx, ctl.Log, time.Minute); err != nil {
		return nil, nil, err
	}
	return agents, stop, nil
}
