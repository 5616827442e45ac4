package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// TestS1ControllerRestartMidRescue kills `rebound controller` (SIGKILL, no
// clean shutdown) right after its first deletion in a rescue of three
// critical Deployments that its policy allows only one at a time
// (maxConcurrent 1), then starts a new one. The rescue must complete, and
// the apiserver's audit log must show exactly one deletion per stranded
// pod: the restarted controller recomputes the plan and repeats nothing.
func TestS1ControllerRestartMidRescue(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	timings.DefaultTolerationSeconds = 300
	c := startSandbox(t, 5, timings)
	ctx := testContext(t, 5*time.Minute)
	f := setUpFaultRescue(ctx, t, c, 3) // fault_helpers_test.go

	first := startController(t, c)
	f.strand(ctx, t)
	first.stop(syscall.SIGKILL)
	metric(t, "restart_deletions_before_kill", float64(len(podDeletesBy(t, c, sandbox.ReboundUser))), "pods")

	startController(t, c)
	f.complete(ctx, t)
}

// waitAvailable waits until every workload is fully available, on node if
// it is set, else on any Ready node other than node-3.
func waitAvailable(ctx context.Context, t *testing.T, c *sandbox.Cluster, ws []scenario.Workload, node string) {
	t.Helper()
	for _, w := range ws {
		tl := scenario.NewTimeline(nil)
		obsCtx, cancel := context.WithCancel(ctx)
		obs := scenario.Observe(obsCtx, c, tl, w)
		_, err := obs.WaitFor(ctx, 2*time.Minute, fmt.Sprintf("%s available", w), func(s scenario.Snapshot) bool {
			if node != "" {
				return s.AvailableOn(node)
			}
			for _, n := range s.PodNodes() {
				if n != "node-3" && s.Nodes[n].Ready && s.Available >= s.Desired && s.Desired > 0 {
					return true
				}
			}
			return false
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}
