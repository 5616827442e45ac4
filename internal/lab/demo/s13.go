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
	with := clusters[1]
	cl, err := scale.Install(ctx, with)
	if err != nil {
		return nil, fmt.Errorf("install rebound in the sandbox: %w", err)
	}
	if err := install.DetectionFor(ctx, cl, "rebound-demo", sandbox.ReboundUser); err != nil {
		return nil, err
	}
	if _, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-demo"}, []byte(scenario.S13Policy)); err != nil {
		return nil, err
	}
	ctl, err := scale.StartController(with, bin, "rebound-controller", "--lease-plane", "--mark-pods-not-ready-early")
	if err != nil {
		return nil, err
	}
	defer func() { ctl.Signal(syscall.SIGTERM); ctl.Wait() }()
	if err := ctl.WaitReady(ctx, time.Minute); err != nil {
		return nil, err
	}
	agents, err := scenario.StartGossipAgents(ctx, with, scenario.GossipAgentOptions{Binary: bin})
	if err != nil {
		return nil, err
	}
	defer scenario.StopAll(agents)
	// The controller holds early judgement for its distrust window after
	// it starts: the death comes after it.
	if err := scenario.WaitEarlyJudgement(ctx, ctl.Log, time.Minute); err != nil {
		return nil, err
	}
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
