package demo

import (
	"context"
	"fmt"

	"rebound/internal/lab/scenario"
)

var s2Info = ScenarioInfo{
	ID:    "S2",
	Title: "platform restore with only node-0 alive (seed 000)",
	Description: "5 nodes; three essential Deployments (calico-kube-controllers, coredns, tiller-deploy) run on nodes 2-4; " +
		"etcd is backed up, then restored with only node-0 alive. Without rebound the restore waits on the Deployments' status; " +
		"with rebound, `rebound restore bringup` runs instead.",
	Measure: "from each essential pod's node NotReady transition to its replacement pod's Ready transition (the API's lastTransitionTimes), the slowest of the three",
}

func runS2(ctx context.Context, env *runEnv) ([]Lane, error) {
	clusters, stop, err := startPair(ctx, env, "S2", 5)
	if err != nil {
		return nil, err
	}
	defer stop()
	deadline := scenario.S2Deadline(env.timings)
	header(env, "S2: 5 nodes; three essential Deployments on nodes 2-4; etcd backup; restore with only node-0 alive.",
		fmt.Sprintf("Without: the restore waits on the Deployments' status. With: `rebound restore bringup`. Deadline %s + %s per node.",
			deadline.Base, deadline.PerNode))

	p := newPair(env, "S2", clusters)
	res, err := scenario.RunS2Pair(ctx, p, scenario.S2PairOptions{Survivor: "node-0", Binaries: env.bins, Deadline: deadline})
	if err != nil {
		return nil, fmt.Errorf("S2 %w", err)
	}
	lanes := pairLanes("S2", "slowest pod's node NotReady", p, res.Without.Recovery, res.With.Recovery)
	for i, r := range []scenario.S2Result{res.Without, res.With} {
		l := &lanes[i]
		l.S2 = &r
		switch {
		case r.Recovered:
			l.Outcome = fmt.Sprintf("%.1fs (%d/%d Deployments on node-0)", l.RecoverySeconds, r.Available, r.Workloads)
		case r.Bringup != nil:
			l.Outcome = fmt.Sprintf("never: timed out after %.0fs, %d/%d Deployments Available, zone %s",
				r.Bringup.ElapsedSeconds, r.Available, r.Workloads, r.Zone)
		}
	}
	env.comparisons = append(env.comparisons, res.Comparison)
	return lanes, nil
}
