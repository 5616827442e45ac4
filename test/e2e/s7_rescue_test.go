package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// S7: never worse than upstream. The scenario logic is in
// internal/lab/scenario/s7.go; these tests start rebound and add the checks.

// s7PolicyTime is the tests' maxUnavailableTime.
const s7PolicyTime = 10 * time.Second

// writePolicy writes a RecoveryPolicy for kube-system's
// system-cluster-critical pods with the given maxUnavailableTime.
func writePolicy(t *testing.T, name string, maxUnavailable time.Duration) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, `apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: %s
spec:
  critical:
    namespaces: [kube-system]
    priorityClassNames: [system-cluster-critical]
  maxUnavailableTime: %s
  limits:
    maxActionsPerMinute: 100
`, name, maxUnavailable), 0o644); err != nil {
		t.Fatal(err)
	}
	config(t, name+"_max_unavailable_time", maxUnavailable.Seconds(), "s")
	return path
}

// s7Timings are the fast timings with upstream's default toleration of
// 300 s: what the S7 and S9 tests count is rebound's deletions, and the
// fast 20 s toleration would let upstream evict pods tainted in the
// moments before the zone leaves Normal.
func s7Timings() sandbox.Timings {
	t := sandbox.FastTimings()
	t.DefaultTolerationSeconds = 300
	return t
}

// policyCondition returns the policy's condition of type typ.
func policyCondition(ctx context.Context, t *testing.T, cl client.Client, policy, typ string) string {
	t.Helper()
	var pol v1alpha1.RecoveryPolicy
	if err := cl.Get(ctx, client.ObjectKey{Name: policy}, &pol); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(pol.Status.Conditions, typ)
	if c == nil {
		return ""
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}

// TestS7NoTarget: 4 of 5 nodes NotReady (PartialDisruption), node-0 Ready
// but cordoned. The critical pod is stranded, yet no node can run its
// replacement: rebound deletes nothing and reports NoTarget (Event, policy
// status). Uncordoning node-0 re-plans at once: the replacement is Ready
// within 5 s of the uncordon, by the API's timestamps.
func TestS7NoTarget(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 5, s7Timings())
	ctx := testContext(t, 6*time.Minute)
	cl := installRebound(ctx, t, c, writePolicy(t, "s7", s7PolicyTime))
	startController(t, c)

	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS7NoTarget(ctx, c, tl, scenario.S7NoTargetOptions{
		Workload:   scenario.CriticalStandIn("node-3"),
		Survivor:   "node-0",
		PolicyTime: s7PolicyTime,
		HoldFor:    2 * s7PolicyTime,
		WhileHeld: func(ctx context.Context) error {
			if n := len(podDeletesBy(t, c, sandbox.ReboundUser)); n != 0 {
				t.Errorf("rebound deleted %d pod(s) while no node could run a replacement, want 0", n)
			}
			if got := policyCondition(ctx, t, cl, "s7", "Degraded"); !strings.HasPrefix(got, "True NoTarget") || !strings.Contains(got, "cordoned") {
				t.Errorf("policy Degraded condition = %q, want True NoTarget naming the cordoned node", got)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.NoTargetEvent, "no Ready node can run the replacement") || !strings.Contains(res.NoTargetEvent, "node-0") {
		t.Errorf("NoTarget Event = %q", res.NoTargetEvent)
	}
	metric(t, "s7_rescue_after_uncordon", res.RescueAfterUncordon.Seconds(), "s")
	// API timestamps are to the second: up to 1 s of rounding either way.
	if res.RescueAfterUncordon > 5*time.Second+time.Second {
		t.Errorf("replacement Ready %s after the uncordon, want within 5 s (+1 s rounding)", res.RescueAfterUncordon)
	}
	if n := len(podDeletesBy(t, c, sandbox.ReboundUser)); n != 1 {
		t.Errorf("rebound deleted %d pods in all, want 1 (after the uncordon)", n)
	}
}

// TestS7ControlPlanePartition: critical pods on nodes 1-4, then every node
// stops heartbeating at once, which is what a control plane cut off from
// its nodes sees. For 3x the policy time rebound deletes nothing (the
// apiserver's audit log is the witness) and diagnose explains the hold.
// Then the partition heals node by node, and the controller restarts in
// between, as an in-cluster controller cut off with its nodes does: node-0
// returns alone, a fresh controller (which never saw every node NotReady)
// plans with nodes 1-4 NotReady for far longer than the policy's time,
// and still deletes nothing, because their clocks start at node-0's
// return. When the nodes return, every critical pod is the one it was.
func TestS7ControlPlanePartition(t *testing.T) {
	t.Parallel()
	// Long enough that nodes 1-4 return within it after node-0 does,
	// with a controller restart in between, on a loaded CI machine.
	const policyTime = 20 * time.Second
	c := startSandbox(t, 5, s7Timings())
	ctx := testContext(t, 7*time.Minute)
	cl := installRebound(ctx, t, c, writePolicy(t, "s7", policyTime))
	ctl := startController(t, c)

	var workloads []scenario.Workload
	for i := 1; i <= 4; i++ {
		w := scenario.CriticalStandIn(sandbox.NodeName(i))
		w.Name = fmt.Sprintf("crit-%d", i)
		workloads = append(workloads, w)
	}
	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS7Partition(ctx, c, tl, scenario.S7PartitionOptions{
		Workloads: workloads,
		HoldFor:   3 * policyTime,
		WhileHeld: func(ctx context.Context) error {
			// Rescue half: nothing deleted.
			deleted := len(podDeletesBy(t, c, sandbox.ReboundUser))
			metricCount(t, "s7_pods_deleted", deleted)
			if deleted != 0 {
				t.Errorf("rebound deleted %d pod(s) while every node was NotReady, want 0", deleted)
			}
			tl.Step("stop the controller: it forgets that every node was NotReady")
			ctl.stop(syscall.SIGTERM)
			return nil
		},
		AfterFirstReturn: func(ctx context.Context) error {
			// A spec change that the fresh controller's first pass
			// acknowledges in status.observedGeneration: the witness
			// that it planned while nodes 1-4 were still NotReady.
			var pol v1alpha1.RecoveryPolicy
			if err := cl.Get(ctx, client.ObjectKey{Name: "s7"}, &pol); err != nil {
				return err
			}
			pol.Spec.Limits.MaxConcurrent = 7
			if err := cl.Update(ctx, &pol); err != nil {
				return err
			}
			tl.Step("start a fresh controller with nodes 1-4 NotReady")
			startController(t, c)
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				var got v1alpha1.RecoveryPolicy
				if err := cl.Get(ctx, client.ObjectKey{Name: "s7"}, &got); err != nil {
					return false, nil //nolint:nilerr // retry until the deadline
				}
				return got.Status.ObservedGeneration == pol.Generation, nil
			})
			if err != nil {
				return fmt.Errorf("the fresh controller never planned (status.observedGeneration): %w", err)
			}
			tl.Step("the fresh controller planned; %d pod(s) deleted", len(podDeletesBy(t, c, sandbox.ReboundUser)))
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.HeldPods != len(workloads) || !strings.Contains(res.Diagnosis, "every node is NotReady") {
		t.Errorf("diagnose reported %d pod(s) Held (want %d), reason %q", res.HeldPods, len(workloads), res.Diagnosis)
	}
	for _, w := range workloads {
		if before, after := res.Before[w.String()], res.After[w.String()]; len(before) != 1 || !slices.Equal(before, after) {
			t.Errorf("%s: pods %v before the partition, %v after: want the same one", w, before, after)
		}
	}
	n := len(podDeletesBy(t, c, sandbox.ReboundUser))
	metricCount(t, "s7_pods_deleted_through_heal", n)
	if n != 0 {
		t.Errorf("rebound deleted %d pod(s) in all, want 0 (also while the nodes returned, across a controller restart)", n)
	}
}
