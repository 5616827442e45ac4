package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// TestS5StatefulPodUntouchedUntilFenced: a StatefulSet pod with a
// ReadWriteOnce volume sits on node-3, which goes NotReady while (as far as
// anyone knows) its processes still run: a partition, not a crash. rebound
// must not force-delete it, however long it waits (two identical pods on one
// volume is the failure fencing exists to prevent), and must report it as
// waiting for fencing. Once the node carries node.kubernetes.io/out-of-service
// (an operator confirmed it off), the pod is rescheduled.
//
// Pods keep upstream's 300 s default toleration, so within this test only
// rebound could move the pod before the taint.
func TestS5StatefulPodUntouchedUntilFenced(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	timings.DefaultTolerationSeconds = 300
	c := startSandbox(t, 5, timings)
	ctx := testContext(t, 5*time.Minute)
	cl := installRebound(ctx, t, c, repoPath(defaultPolicyFile))
	startController(t, c)

	res, err := scenario.RunS5(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S5Options{
		Node: "node-3",
		// rebound reports the pod as waiting for fencing once it is
		// stranded (maxUnavailableTime 30 s)...
		Reported: func(ctx context.Context) error {
			var pol v1alpha1.RecoveryPolicy
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
				if err := cl.Get(ctx, client.ObjectKey{Name: "default"}, &pol); err != nil {
					return false, nil //nolint:nilerr // poll until the deadline
				}
				return pol.Status.WaitingForFencing == 1, nil
			})
			if err != nil {
				return fmt.Errorf("policy never reported the pod as waiting for fencing: status %+v: %w", pol.Status, err)
			}
			// ...and has deleted nothing.
			if n := len(podDeletesBy(t, c, sandbox.ReboundUser)); n != 0 {
				return fmt.Errorf("rebound deleted %d pods before fencing, want 0", n)
			}
			return nil
		},
		// 20 s more, well past the point where a stateless pod would
		// have been deleted.
		Hold: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	metric(t, "s5_waiting_for_fencing_reported_after_notready", (res.ReportedAt - res.NotReadyAt).Seconds(), "s")
	metric(t, "s5_rescheduled_after_fencing", res.MovedSeconds, "s")
	t.Logf("stateful pod rescheduled on %s after fencing", res.MovedOn)
}
