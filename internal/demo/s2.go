package demo

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"rebound/internal/scenario"
)

var s2Info = ScenarioInfo{
	ID:    "S2",
	Title: "platform restore with only node-0 alive (seed 000)",
	Description: "5 nodes; three essential Deployments (calico-kube-controllers, coredns, tiller-deploy) run on nodes 2-4; " +
		"etcd is backed up, then restored with only node-0 alive. Without rebound the restore waits on the Deployments' status; " +
		"with rebound, `rebound restore bringup` runs instead.",
	Measure: "from the restored control plane being up to every essential Deployment Available on a Ready node",
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

	lanes := []*Lane{{Scenario: "S2", Name: laneWithout}, {Scenario: "S2", Name: laneWith, Rebound: true}}
	errs := make([]error, len(lanes))
	var wg sync.WaitGroup
	for i, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clusters[i]
			tl := scenario.NewTimeline(laneWriter(env, "S2", l.Name))
			res, err := scenario.RunS2(ctx, c, tl, scenario.S2Options{
				Survivor: "node-0",
				Backup:   filepath.Join(c.Dir, "platform-backup.db"),
				Binaries: env.bins,
				Deadline: deadline,
				Bringup:  l.Rebound,
			})
			errs[i] = err
			l.Events = tl.Events()
			l.S2 = &res
			l.setRecovery("restored", res.RestoredAt, res.RecoveredAt, res.Recovered)
			if res.Recovered {
				l.Outcome = fmt.Sprintf("%.1fs (%d/%d Deployments on node-0)", l.RecoverySeconds, res.Available, res.Workloads)
			} else if res.Bringup != nil {
				l.Outcome = fmt.Sprintf("never: timed out after %.0fs, %d/%d Deployments Available, zone %s",
					res.Bringup.ElapsedSeconds, res.Available, res.Workloads, res.Zone)
			}
		}()
	}
	wg.Wait()
	for i := range lanes {
		if errs[i] != nil {
			return nil, fmt.Errorf("S2 %s: %w (logs in %s)", lanes[i].Name, errs[i], filepath.Join(clusters[i].Dir, "logs"))
		}
	}
	return []Lane{*lanes[0], *lanes[1]}, nil
}
