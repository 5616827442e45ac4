package scenario

import (
	"context"
	"fmt"
	"time"

	"rebound/internal/lab/sandbox"
)

// S3Options tune scenario S3: one node of five dies, the zone stays Normal,
// and upstream taint-based eviction moves the pod after its toleration.
type S3Options struct {
	Workload Workload
	// Timeout bounds the wait for the replacement after the node is
	// NotReady.
	Timeout time.Duration
	// SkipTaintWait does not wait for the NoExecute taint before waiting
	// for the replacement: with rebound the pod may move before upstream
	// evicts it, and the taint is not what the scenario measures.
	SkipTaintWait bool
}

// S3Result is what S3 found.
type S3Result struct {
	NodeNotReadyAt time.Duration `json:"nodeNotReadyAt"`
	TaintedAt      time.Duration `json:"taintedAt"`
	RecoveredAt    time.Duration `json:"recoveredAt"`
	RecoveredOn    string        `json:"recoveredOn"`
	Final          Snapshot      `json:"final"`
	// Recovery is the time to recovery from the API's timestamps.
	Recovery Recovery `json:"recovery"`
}

// RunS3 plays S3 on a running sandbox.
func RunS3(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S3Options) (S3Result, error) {
	var res S3Result
	w := opts.Workload
	grace := c.Timings.NodeMonitorGracePeriod
	obs := Observe(ctx, c, tl, w)

	if err := deployOnPreferredNode(ctx, c, tl, obs, w); err != nil {
		return res, err
	}
	tl.Step("stop %s only (heartbeats stop)", w.PreferNode)
	if err := c.StopNode(ctx, w.PreferNode); err != nil {
		return res, err
	}
	var err error
	if res.NodeNotReadyAt, err = obs.WaitFor(ctx, grace+time.Minute, w.PreferNode+" NotReady", func(s Snapshot) bool {
		return !s.Nodes[w.PreferNode].Ready
	}); err != nil {
		return res, err
	}
	if !opts.SkipTaintWait {
		if res.TaintedAt, err = obs.WaitFor(ctx, opts.Timeout, w.PreferNode+" tainted NoExecute", func(s Snapshot) bool {
			return s.Nodes[w.PreferNode].NoExecute
		}); err != nil {
			return res, err
		}
	}
	res.RecoveredAt, err = obs.WaitFor(ctx, opts.Timeout, "replacement available on another node", func(s Snapshot) bool {
		for _, n := range s.PodNodes() {
			if n != w.PreferNode && s.Nodes[n].Ready && s.Available >= s.Desired && s.Desired > 0 {
				return true
			}
		}
		return false
	})
	if err != nil {
		return res, err
	}
	res.Final = obs.Snapshot()
	for _, n := range res.Final.PodNodes() {
		if n != w.PreferNode {
			res.RecoveredOn = n
		}
	}
	if res.RecoveredOn == "" {
		return res, fmt.Errorf("S3: no replacement node found in %v", res.Final.PodNodes())
	}
	if res.Recovery, err = MeasureRecovery(ctx, c.Client, w, w.PreferNode, time.Now()); err != nil {
		return res, err
	}
	if !res.Recovery.Recovered {
		return res, fmt.Errorf("S3: %s seen available on %s, but no replacement pod Ready after %s's NotReady transition", w, res.RecoveredOn, w.PreferNode)
	}
	tl.Step("%s available again on %s: pod %s Ready %.1fs after %s's NotReady transition (lastTransitionTimes)",
		w, res.RecoveredOn, res.Recovery.Pod, res.Recovery.Seconds, w.PreferNode)
	return res, nil
}
