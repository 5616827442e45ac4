package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// TestS9BounceOnce: a Deployment that stays short (its pods never count as
// available) is scale-bounced once after the replacement timeout; then 11
// other rescues push that bounce out of the policy's 10-record
// status.lastActions while the Deployment is still short, well past the
// timeout: it is not bounced again. The apiserver's audit log counts
// rebound's writes to it.
func TestS9BounceOnce(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 5, s7Timings())
	ctx := testContext(t, 9*time.Minute)
	const replacementTimeout = 10 * time.Second
	cl := installRebound(ctx, t, c, writePolicy(t, "s9", s7PolicyTime))
	startController(t, c, "--replacement-timeout", replacementTimeout.String())
	config(t, "s9_replacement_timeout", replacementTimeout.Seconds(), "s")

	short := scenario.CriticalStandIn("node-3")
	short.Name = "s9-short"
	var others []scenario.Workload
	for i := 1; i <= 11; i++ {
		w := scenario.CriticalStandIn("node-2")
		w.Name = fmt.Sprintf("s9-other-%02d", i)
		others = append(others, w)
	}
	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS9(ctx, c, tl, scenario.S9Options{
		Short:        short,
		Others:       others,
		OthersNode:   "node-2",
		Survivor:     "node-0",
		ObserveAfter: 3 * replacementTimeout,
		User:         sandbox.ReboundUser,
	})
	if err != nil {
		t.Fatal(err)
	}
	metricCount(t, "s9_bounces", res.Bounces)
	if res.ShortUpdates != 2 || res.Bounces != 1 {
		t.Errorf("rebound wrote %s %d time(s) (%d bounce(s)), want 2 writes: exactly one bounce", short, res.ShortUpdates, res.Bounces)
	}
	if res.OtherDeletes < 11 {
		t.Errorf("only %d other rescues, want more than 10 so that the bounce leaves status.lastActions", res.OtherDeletes)
	}
	if res.BouncedFor == "" {
		t.Error("the Deployment carries no rebound.dev/scale-bounced-for annotation")
	}
	var pol v1alpha1.RecoveryPolicy
	if err := cl.Get(ctx, client.ObjectKey{Name: "s9"}, &pol); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(pol.Status.LastActions, func(a v1alpha1.ActionRecord) bool { return a.Action == v1alpha1.RecordedScaleBounce }) {
		t.Errorf("status.lastActions still holds the bounce: the test did not age it out: %+v", pol.Status.LastActions)
	}
}
