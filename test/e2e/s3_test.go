package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/diagnose"
)

// s3Toleration is the pods' default NoExecute toleration in both lanes of
// S3. Upstream's default is 300 s; 120 s keeps the same order (several
// times the policy's 30 s) and the test within `go test`'s default 10 min.
const s3Toleration = 120

// TestS3WithoutAndWithRebound: only node-3 dies, so the zone stays Normal
// (1 of 5 NotReady), on two sandboxes at once (scenario.RunS3Pair).
//
// Without rebound, upstream taint-based eviction works: node-3 is tainted
// NoExecute at the normal rate and the pod is deleted once its default
// toleration (through the apiserver's --default-unreachable-toleration-
// seconds) runs out. With rebound under the default policy (30 s), the
// critical pod moves after about 30 s, not after the toleration.
//
// Recovery is measured from node-3's Ready lastTransitionTime to the
// replacement pod's, in both lanes of the same run.
func TestS3WithoutAndWithRebound(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	timings.DefaultTolerationSeconds = s3Toleration
	p := startPair(t, 5, timings)
	ctx := testContext(t, 8*time.Minute)
	installRebound(ctx, t, p.With, repoPath(defaultPolicyFile))
	startController(t, p.With)

	toleration := time.Duration(timings.DefaultTolerationSeconds) * time.Second
	res, err := scenario.RunS3Pair(ctx, p, scenario.S3PairOptions{
		Workload: scenario.CriticalStandIn("node-3"),
		Timeout:  toleration + 2*time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	results(t, res.Comparison.Write)
	config(t, "s3_pod_toleration", float64(timings.DefaultTolerationSeconds), "s")
	config(t, "s3_max_unavailable_time", s1PolicyTime.Seconds(), "s")

	for lane, r := range map[string]scenario.S3Result{scenario.LaneWithout: res.Without, scenario.LaneWith: res.With} {
		if z := r.Final.Zones["sandbox/zone-a"]; z != "Normal" {
			t.Errorf("%s: zone state = %q, want Normal (1 of 5 NotReady)", lane, z)
		}
		if r.RecoveredOn == "node-3" || !r.Final.Nodes[r.RecoveredOn].Ready {
			t.Errorf("%s: replacement on %q, want a Ready node other than node-3", lane, r.RecoveredOn)
		}
	}
	// Without: the pod must not move before its toleration has run out
	// from the taint, and should move soon after (one taint pass, one
	// scheduling). Both ends are API timestamps (one-second resolution).
	without := time.Duration(res.Without.Recovery.Seconds * float64(time.Second))
	if moved := res.Without.RecoveredAt - res.Without.TaintedAt; moved < toleration-time.Second {
		t.Errorf("without rebound the pod was replaced %s after the NoExecute taint, before its %s toleration ran out", moved, toleration)
	}
	if without < toleration-2*time.Second || without > toleration+30*time.Second {
		t.Errorf("without rebound the pod was replaced %s after node-3's NotReady transition, want toleration %s to %s + 30s", without, toleration, toleration)
	}
	metric(t, "s3_without_rebound_taint_after_notready", (res.Without.TaintedAt - res.Without.NodeNotReadyAt).Seconds(), "s")
	t.Run("diagnose does not credit rebound with upstream's eviction", func(t *testing.T) {
		s3DiagnoseWithout(ctx, t, p.Without)
	})
	// With: about maxUnavailableTime, not the toleration.
	with := time.Duration(res.With.Recovery.Seconds * float64(time.Second))
	if with < s1PolicyTime-2*time.Second || with > s1PolicyTime+15*time.Second {
		t.Errorf("with rebound the critical pod was replaced %s after node-3's NotReady transition, want about maxUnavailableTime %s (not the %s toleration)", with, s1PolicyTime, toleration)
	}
}

// s3DiagnoseWithout runs the built `rebound diagnose -o json`, as a user
// would, on the lane without rebound: the old pod, evicted by
// kube-controller-manager and replaced, must be reported as upstream's
// doing, not as "rescue complete".
func s3DiagnoseWithout(ctx context.Context, t *testing.T, c *sandbox.Cluster) {
	r := runCLI(ctx, t, reboundBinary, "diagnose", "--kubeconfig", c.Kubeconfig, "-o", "json")
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("rebound diagnose -o json (exit %d): %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	cp := criticalPod(rep, "kube-system", "calico-kube-controllers")
	if cp == nil {
		t.Fatalf("diagnose lists no critical pod of calico-kube-controllers:\n%s", r.stdout)
	}
	t.Logf("diagnose: %s %s: %s", cp.Name, cp.Decision, cp.Reason)
	if cp.Decision != "Replaced" || !strings.Contains(cp.Reason, "evicted by kube-controller-manager") || strings.Contains(cp.Reason, "rescue complete") {
		t.Errorf("diagnose says %s: %q; want Replaced, evicted by kube-controller-manager, not a rescue", cp.Decision, cp.Reason)
	}
}
