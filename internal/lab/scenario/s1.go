package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/zone"
)

// S1Options tune scenario S1: five nodes in one zone, a critical
// Deployment's pod on node-3, nodes 1-4 die.
type S1Options struct {
	// Workload is the critical Deployment; its pod goes on Workload.PreferNode.
	Workload Workload
	// Survivor is the node that stays up (controller-0 in the seed).
	Survivor string
	// AllAtOnce stops every other node in one step. Then kwok's jittered
	// Lease renewals decide whether the pod's node is noticed before or
	// after the zone flips to PartialDisruption (see RunS1). Otherwise the
	// pod's node is stopped last, once the zone has flipped, which makes
	// the outcome deterministic.
	AllAtOnce bool
	// Observe is how long to watch after the pod's node is NotReady.
	Observe time.Duration
}

// S1Result is what S1 found.
type S1Result struct {
	// PartialDisruptionAt is when the controller-manager logged that the
	// zone entered PartialDisruption (timeline time).
	PartialDisruptionAt time.Duration `json:"partialDisruptionAt"`
	// PodNodeNotReadyAt is when the pod's node was seen NotReady.
	PodNodeNotReadyAt time.Duration `json:"podNodeNotReadyAt"`
	// Final is the last observation, Observe after PodNodeNotReadyAt.
	Final Snapshot `json:"final"`
	// Recovered is true when the workload became available again on a
	// Ready node during the observation, and RecoveredAt says when.
	Recovered   bool          `json:"recovered"`
	RecoveredAt time.Duration `json:"recoveredAt"`
	// PodNodeTainted is true when the pod's node got a NoExecute taint,
	// i.e. upstream started evicting it.
	PodNodeTainted bool `json:"podNodeTainted"`
	// Recovery is the time to recovery from the API's timestamps: from
	// the pod's node's Ready lastTransitionTime to the replacement pod's.
	Recovery Recovery `json:"recovery"`
}

// RunS1 plays S1 on a running sandbox. The sandbox must have the workload's
// preferred node and the survivor among its nodes, and at least 5 nodes so
// the zone can enter PartialDisruption.
func RunS1(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S1Options) (S1Result, error) {
	var res S1Result
	w := opts.Workload
	if len(c.NodeNames) < 5 {
		return res, fmt.Errorf("S1 needs at least 5 nodes, the sandbox has %d", len(c.NodeNames))
	}
	for _, n := range []string{w.PreferNode, opts.Survivor} {
		if !slices.Contains(c.NodeNames, n) {
			return res, fmt.Errorf("S1: no node %q in the sandbox (nodes are %v)", n, c.NodeNames)
		}
	}
	grace := c.Timings.NodeMonitorGracePeriod
	obs := Observe(ctx, c, tl, w)

	if err := deployOnPreferredNode(ctx, c, tl, obs, w); err != nil {
		return res, err
	}

	var others []string
	for _, n := range c.NodeNames {
		if n != opts.Survivor && n != w.PreferNode {
			others = append(others, n)
		}
	}
	first := others
	if opts.AllAtOnce {
		first = append(slices.Clone(others), w.PreferNode)
	}
	tl.Step("stop %s (heartbeats stop; NotReady after the %s grace period)", strings.Join(first, ", "), grace)
	for _, n := range first {
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	zoneName := zone.DisplayZone(c.ZoneKey)
	var err error
	res.PartialDisruptionAt, err = obs.WaitFor(ctx, grace+2*time.Minute, "zone enters PartialDisruption", func(s Snapshot) bool {
		return s.Zones[zoneName] == "PartialDisruption"
	})
	if err != nil {
		return res, err
	}
	if !opts.AllAtOnce {
		tl.Step("stop %s, where the critical pod runs", w.PreferNode)
		if err := c.StopNode(ctx, w.PreferNode); err != nil {
			return res, err
		}
	}
	res.PodNodeNotReadyAt, err = obs.WaitFor(ctx, grace+time.Minute, w.PreferNode+" NotReady", func(s Snapshot) bool {
		return !s.Nodes[w.PreferNode].Ready
	})
	if err != nil {
		return res, err
	}

	tl.Step("watch for %s: does the pod leave %s?", opts.Observe, w.PreferNode)
	at, err := obs.WaitFor(ctx, opts.Observe, "recovery", func(s Snapshot) bool {
		return s.AvailableOn(opts.Survivor)
	})
	if err == nil {
		res.Recovered, res.RecoveredAt = true, at
	} else if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Final = obs.Snapshot()
	res.PodNodeTainted = res.Final.Nodes[w.PreferNode].NoExecute
	if res.Recovery, err = MeasureRecovery(ctx, c.Client, w, w.PreferNode, time.Now()); err != nil {
		return res, err
	}
	if res.Recovered && !res.Recovery.Recovered {
		return res, fmt.Errorf("S1: %s seen available on %s, but no replacement pod Ready after %s's NotReady transition", w, opts.Survivor, w.PreferNode)
	}
	if res.Recovered {
		tl.Step("%s available again on %s: pod %s Ready %.1fs after %s's NotReady transition (lastTransitionTimes)",
			w, opts.Survivor, res.Recovery.Pod, res.Recovery.Seconds, w.PreferNode)
	} else {
		tl.Step("after %s: %s still %d/%d available, pod still bound to %v, zone %s",
			opts.Observe, w, res.Final.Available, res.Final.Desired, res.Final.PodNodes(), res.Final.Zones[zoneName])
	}
	return res, nil
}
