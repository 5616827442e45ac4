package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/sandbox"
	"rebound/internal/scenario"
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

	policy := filepath.Join(t.TempDir(), "serial.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: serial
spec:
  critical:
    namespaces: [kube-system]
    priorityClassNames: [system-cluster-critical]
  maxUnavailableTime: 10s
  limits:
    maxConcurrent: 1
    maxActionsPerMinute: 10
`), 0o644); err != nil {
		t.Fatal(err)
	}
	installRebound(ctx, t, c, policy)

	var workloads []scenario.Workload
	for _, name := range []string{"crit-a", "crit-b", "crit-c"} {
		w := scenario.CriticalStandIn("node-3")
		w.Name = name
		workloads = append(workloads, w)
	}
	if err := scenario.DeployOnPreferredNodes(ctx, c, scenario.NewTimeline(testWriter(t)), workloads); err != nil {
		t.Fatal(err)
	}

	first := startController(t, c)
	if err := c.StopNode(ctx, "node-3"); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return len(podDeletesBy(t, c, sandbox.ReboundUser)) > 0, nil
	})
	if err != nil {
		t.Fatalf("first controller never deleted a pod: %v", err)
	}
	first.stop(syscall.SIGKILL)
	before := len(podDeletesBy(t, c, sandbox.ReboundUser))
	metric(t, "restart_deletions_before_kill", float64(before), "pods")

	startController(t, c)
	waitAvailableElsewhere(ctx, t, c, workloads)

	deletes := podDeletesBy(t, c, sandbox.ReboundUser)
	names := sets.New[string]()
	for _, d := range deletes {
		names.Insert(d.ObjectRef.Name)
	}
	metric(t, "restart_total_deletions", float64(len(deletes)), "pods")
	if len(deletes) != 3 || names.Len() != 3 {
		t.Errorf("rebound deleted %d pods (%d distinct: %v), want exactly 3, one per stranded pod", len(deletes), names.Len(), sets.List(names))
	}
}

// waitAvailableElsewhere waits until every workload is fully available on
// a Ready node other than node-3.
func waitAvailableElsewhere(ctx context.Context, t *testing.T, c *sandbox.Cluster, ws []scenario.Workload) {
	t.Helper()
	for _, w := range ws {
		tl := scenario.NewTimeline(nil)
		obsCtx, cancel := context.WithCancel(ctx)
		obs := scenario.Observe(obsCtx, c, tl, w)
		_, err := obs.WaitFor(ctx, 2*time.Minute, fmt.Sprintf("%s available", w), func(s scenario.Snapshot) bool {
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
