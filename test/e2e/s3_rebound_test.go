package e2e

import (
	"testing"
	"time"

	"rebound/internal/sandbox"
	"rebound/internal/scenario"
)

// TestS3WithReboundCriticalPodReplacedAfterPolicyTime: only node-3 dies, the
// zone stays Normal, and pods keep upstream's default 300 s toleration.
// Upstream would move the critical pod after 300 s; rebound, under the
// default policy (30 s), must move it after about 30 s.
func TestS3WithReboundCriticalPodReplacedAfterPolicyTime(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	timings.DefaultTolerationSeconds = 300 // upstream's default, as in production
	c := startSandbox(t, 5, timings)
	ctx := testContext(t, 5*time.Minute)
	installRebound(ctx, t, c, repoPath(defaultPolicyFile))
	startController(t, c)

	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS3(ctx, c, tl, scenario.S3Options{
		Workload:      scenario.CriticalStandIn("node-3"),
		Timeout:       2 * time.Minute,
		SkipTaintWait: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	took := res.RecoveredAt - res.NodeNotReadyAt
	metric(t, "s3_with_rebound_recovery_after_notready", took.Seconds(), "s")
	const policyTime = 30 * time.Second
	if took < policyTime-5*time.Second || took > policyTime+15*time.Second {
		t.Errorf("critical pod replaced %s after node-3 NotReady, want about maxUnavailableTime %s (not the %ds toleration)", took, policyTime, timings.DefaultTolerationSeconds)
	}
	if z := res.Final.Zones["sandbox/zone-a"]; z != "Normal" {
		t.Errorf("zone = %q, want Normal", z)
	}
}
