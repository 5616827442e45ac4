package e2e

import (
	"testing"
	"time"

	"rebound/internal/sandbox"
	"rebound/internal/scenario"
)

// TestS3WithoutReboundPodEvictedAfterToleration: only node-3 dies, so the
// zone stays Normal (1 of 5 NotReady) and upstream taint-based eviction
// works: node-3 is tainted NoExecute at the normal rate and the pod is
// deleted once its default toleration (20 s in this test, through the
// apiserver's --default-unreachable-toleration-seconds) runs out. This is
// the anchor rebound's policy budget is measured against.
func TestS3WithoutReboundPodEvictedAfterToleration(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	c := startSandbox(t, 5, timings)
	ctx := testContext(t, 5*time.Minute)

	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS3(ctx, c, tl, scenario.S3Options{
		Workload: scenario.CriticalStandIn("node-3"),
		Timeout:  2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if z := res.Final.Zones["sandbox/zone-a"]; z != "Normal" {
		t.Errorf("zone state = %q, want Normal (1 of 5 NotReady)", z)
	}
	toleration := time.Duration(timings.DefaultTolerationSeconds) * time.Second
	took := res.RecoveredAt - res.NodeNotReadyAt
	// The pod must not move before its toleration has run out from the
	// taint, and should move soon after (one taint pass, one scheduling).
	if moved := res.RecoveredAt - res.TaintedAt; moved < toleration-time.Second {
		t.Errorf("pod replaced %s after the NoExecute taint, before its %s toleration ran out", moved, toleration)
	}
	if took > toleration+30*time.Second {
		t.Errorf("pod replaced %s after node-3 went NotReady, want within toleration %s + 30s", took, toleration)
	}
	if res.RecoveredOn == "node-3" || !res.Final.Nodes[res.RecoveredOn].Ready {
		t.Errorf("replacement on %q, want a Ready node other than node-3", res.RecoveredOn)
	}
	metric(t, "s3_without_rebound_recovery_after_notready", took.Seconds(), "s")
	metric(t, "s3_without_rebound_taint_after_notready", (res.TaintedAt - res.NodeNotReadyAt).Seconds(), "s")
}
