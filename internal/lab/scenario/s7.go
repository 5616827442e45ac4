package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/diagnose"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// S7 is "never worse than upstream": rebound must not act where acting
// could be worse than kube-controller-manager's stall. Two runners:
//
//   - RunS7NoTarget: 4 of 5 nodes NotReady and the only Ready node
//     cordoned: nothing can run a replacement, so rebound holds (NoTarget);
//     the uncordon re-plans at once (rebound watches nodes).
//   - RunS7Partition: every node stops heartbeating at once, as when the
//     control plane is cut off from them: rebound holds like upstream (full
//     disruption), and when the nodes return every critical pod is the one
//     it was.
//
// Both expect `rebound controller` to run (the caller starts it) under a
// policy that makes the workloads critical. Checks that belong to one test
// run in the hooks.

// scenarioFieldManager names the scenario's own writes, so that their time
// can be read back from the object's managedFields.
const scenarioFieldManager = "rebound-scenario"

// S7NoTargetOptions tune RunS7NoTarget.
type S7NoTargetOptions struct {
	// Workload is the critical Deployment, first on Workload.PreferNode.
	Workload Workload
	// Survivor stays Ready but is cordoned while the others are down.
	Survivor string
	// PolicyTime is the policy's maxUnavailableTime: the pod is stranded
	// that long after its node is NotReady.
	PolicyTime time.Duration
	// HoldFor is how long to keep the survivor cordoned once rebound has
	// reported NoTarget, to see that it keeps holding.
	HoldFor time.Duration
	// WhileHeld runs at the end of HoldFor, before the uncordon (the
	// test counts deletions there); nil skips it.
	WhileHeld func(ctx context.Context) error
}

// S7NoTargetResult is what RunS7NoTarget found. Times are the API's.
type S7NoTargetResult struct {
	// NoTargetEvent is the message of rebound's RescueNoTarget Event.
	NoTargetEvent string `json:"noTargetEvent"`
	// UncordonedAt is the uncordon's time (the survivor's managedFields
	// entry of the scenario's update, to the second); ReplacementReadyAt
	// the replacement pod's Ready condition lastTransitionTime.
	UncordonedAt       time.Time `json:"uncordonedAt"`
	ReplacementReadyAt time.Time `json:"replacementReadyAt"`
	// RescueAfterUncordon is ReplacementReadyAt - UncordonedAt.
	RescueAfterUncordon time.Duration `json:"rescueAfterUncordon"`
	Final               Snapshot      `json:"final"`
}

// RunS7NoTarget plays S7 (no target) on a running sandbox of 5+ nodes.
func RunS7NoTarget(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S7NoTargetOptions) (S7NoTargetResult, error) {
	var res S7NoTargetResult
	w := opts.Workload
	if len(c.NodeNames) < 5 || !slices.Contains(c.NodeNames, opts.Survivor) || !slices.Contains(c.NodeNames, w.PreferNode) {
		return res, fmt.Errorf("S7: needs 5 nodes with %s and %s, the sandbox has %v", opts.Survivor, w.PreferNode, c.NodeNames)
	}
	grace := c.Timings.NodeMonitorGracePeriod
	obs := Observe(ctx, c, tl, w)
	if err := deployOnPreferredNode(ctx, c, tl, obs, w); err != nil {
		return res, err
	}
	tl.Step("cordon %s, the only node that will stay Ready", opts.Survivor)
	if _, err := setUnschedulable(ctx, c, opts.Survivor, true); err != nil {
		return res, err
	}
	var others []string
	for _, n := range c.NodeNames {
		if n != opts.Survivor && n != w.PreferNode {
			others = append(others, n)
		}
	}
	// As in S1: the pod's node dies last, once the zone is in
	// PartialDisruption, so that upstream never starts evicting it.
	tl.Step("stop %s", strings.Join(others, ", "))
	for _, n := range others {
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	zoneName := zone.DisplayZone(c.ZoneKey)
	if _, err := obs.WaitFor(ctx, grace+2*time.Minute, "zone enters PartialDisruption", func(s Snapshot) bool {
		return s.Zones[zoneName] == "PartialDisruption"
	}); err != nil {
		return res, err
	}
	tl.Step("stop %s, where the critical pod runs", w.PreferNode)
	if err := c.StopNode(ctx, w.PreferNode); err != nil {
		return res, err
	}
	if _, err := obs.WaitFor(ctx, grace+time.Minute, w.PreferNode+" NotReady", func(s Snapshot) bool {
		return !s.Nodes[w.PreferNode].Ready
	}); err != nil {
		return res, err
	}

	tl.Step("wait for rebound to report NoTarget (the pod is stranded %s after NotReady)", opts.PolicyTime)
	ev, err := waitEvent(ctx, c, w.Namespace, "RescueNoTarget", opts.PolicyTime+time.Minute)
	if err != nil {
		return res, err
	}
	res.NoTargetEvent = ev.Message
	tl.Step("rebound: %s", ev.Message)
	if err := sleep(ctx, opts.HoldFor); err != nil {
		return res, err
	}
	if opts.WhileHeld != nil {
		if err := opts.WhileHeld(ctx); err != nil {
			return res, err
		}
	}

	tl.Step("uncordon %s", opts.Survivor)
	n, err := setUnschedulable(ctx, c, opts.Survivor, false)
	if err != nil {
		return res, err
	}
	res.UncordonedAt = managedFieldsTime(n.ManagedFields)
	if res.UncordonedAt.IsZero() {
		return res, fmt.Errorf("the uncordon of %s left no managedFields time", opts.Survivor)
	}
	if _, err := obs.WaitFor(ctx, time.Minute, w.String()+" available on "+opts.Survivor, func(s Snapshot) bool {
		return s.AvailableOn(opts.Survivor)
	}); err != nil {
		return res, err
	}
	res.Final = obs.Snapshot()
	res.ReplacementReadyAt, err = readyPodSince(ctx, c, w, opts.Survivor)
	if err != nil {
		return res, err
	}
	res.RescueAfterUncordon = res.ReplacementReadyAt.Sub(res.UncordonedAt)
	tl.Step("replacement Ready on %s %s after the uncordon (API timestamps)", opts.Survivor, res.RescueAfterUncordon)
	return res, nil
}

// S7PartitionOptions tune RunS7Partition.
type S7PartitionOptions struct {
	// Workloads are critical Deployments, each first on its PreferNode.
	Workloads []Workload
	// HoldFor is how long every node stays NotReady (3x the policy's
	// maxUnavailableTime in the test).
	HoldFor time.Duration
	// WhileHeld runs at the end of HoldFor, before the nodes return (the
	// test counts deletions there; the peering half adds its checks);
	// nil skips it.
	WhileHeld func(ctx context.Context) error
	// AfterFirstReturn, when set, makes the partition heal node by node:
	// the first node starts alone, and the hook runs once it is Ready,
	// before the others start (the test restarts the controller there).
	AfterFirstReturn func(ctx context.Context) error
}

// S7PartitionResult is what RunS7Partition found.
type S7PartitionResult struct {
	// Diagnosis is `rebound diagnose`'s reason for a held pod during the
	// partition; HeldPods counts the critical pods it reports Held.
	Diagnosis string `json:"diagnosis"`
	HeldPods  int    `json:"heldPods"`
	// Before and After map each workload to its pods' UIDs, before the
	// partition and once every node is back.
	Before map[string][]types.UID `json:"before"`
	After  map[string][]types.UID `json:"after"`
}

// RunS7Partition plays S7 (control-plane partition) on a running sandbox.
func RunS7Partition(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S7PartitionOptions) (S7PartitionResult, error) {
	res := S7PartitionResult{After: map[string][]types.UID{}}
	grace := c.Timings.NodeMonitorGracePeriod
	var err error
	if res.Before, err = deployRecorded(ctx, c, tl, opts.Workloads); err != nil {
		return res, err
	}

	tl.Step("stop every node at once (%s): the control plane no longer hears from any", strings.Join(c.NodeNames, ", "))
	for _, n := range c.NodeNames {
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range c.NodeNames {
		if err := c.WaitNodeReady(ctx, n, false, grace+time.Minute); err != nil {
			return res, err
		}
	}
	tl.Step("every node NotReady; hold for %s", opts.HoldFor)
	if err := sleep(ctx, opts.HoldFor); err != nil {
		return res, err
	}
	report, _, err := diagnose.Run(ctx, diagnose.Options{Config: c.Config})
	if err != nil {
		return res, fmt.Errorf("diagnose: %w", err)
	}
	for _, cp := range report.CriticalPods {
		if cp.Decision == string(rescue.DecisionHeld) {
			res.HeldPods++
			res.Diagnosis = cp.Reason
		}
	}
	tl.Step("diagnose: %d critical pod(s) Held: %s", res.HeldPods, res.Diagnosis)
	if opts.WhileHeld != nil {
		if err := opts.WhileHeld(ctx); err != nil {
			return res, err
		}
	}

	rest := c.NodeNames
	if opts.AfterFirstReturn != nil {
		first := c.NodeNames[0]
		tl.Step("start %s alone: the partition heals node by node", first)
		if err := c.StartNode(ctx, first); err != nil {
			return res, err
		}
		if err := c.WaitNodeReady(ctx, first, true, grace+time.Minute); err != nil {
			return res, err
		}
		if err := opts.AfterFirstReturn(ctx); err != nil {
			return res, err
		}
		rest = c.NodeNames[1:]
	}
	tl.Step("start %s again", strings.Join(rest, ", "))
	for _, n := range rest {
		if err := c.StartNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range c.NodeNames {
		if err := c.WaitNodeReady(ctx, n, true, grace+time.Minute); err != nil {
			return res, err
		}
	}
	for _, w := range opts.Workloads {
		obsCtx, stop := context.WithCancel(ctx)
		_, err := Observe(obsCtx, c, tl, w).WaitFor(ctx, time.Minute, w.String()+" available", func(s Snapshot) bool {
			return s.Desired > 0 && s.Available >= s.Desired
		})
		stop()
		if err != nil {
			return res, err
		}
		if res.After[w.String()], err = podUIDs(ctx, c, w); err != nil {
			return res, err
		}
	}
	tl.Step("every node back and every workload available")
	return res, nil
}

// setUnschedulable cordons or uncordons a node, as `kubectl cordon` does,
// and returns the node as written.
func setUnschedulable(ctx context.Context, c *sandbox.Cluster, name string, on bool) (*corev1.Node, error) {
	var out *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		n.Spec.Unschedulable = on
		// An annotation the scenario always owns: unschedulable=false is
		// no field at all, and a manager that owns no field loses its
		// managedFields entry, whose time is the uncordon's.
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations["scenario.rebound.dev/cordoned"] = fmt.Sprint(on)
		out, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: scenarioFieldManager})
		return err == nil, nil // a conflict with a heartbeat: read again
	})
	if err != nil {
		return nil, fmt.Errorf("set spec.unschedulable=%v on %s: %w", on, name, err)
	}
	return out, nil
}

// managedFieldsTime is when the scenario last updated the object, as the
// API server recorded it.
func managedFieldsTime(entries []metav1.ManagedFieldsEntry) time.Time {
	var t time.Time
	for _, e := range entries {
		if e.Manager == scenarioFieldManager && e.Time != nil && e.Time.After(t) {
			t = e.Time.Time
		}
	}
	return t
}

// readyPodSince is the Ready condition's lastTransitionTime of the
// workload's live, Ready pod on node.
func readyPodSince(ctx context.Context, c *sandbox.Cluster, w Workload, node string) (time.Time, error) {
	pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
	if err != nil {
		return time.Time{}, err
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return cond.LastTransitionTime.Time, nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("%s has no Ready pod on %s", w, node)
}

// podUIDs lists the workload's live pods' UIDs, sorted.
func podUIDs(ctx context.Context, c *sandbox.Cluster, w Workload) ([]types.UID, error) {
	pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
	if err != nil {
		return nil, err
	}
	var uids []types.UID
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			uids = append(uids, p.UID)
		}
	}
	slices.Sort(uids)
	return uids, nil
}

// waitEvent waits for an Event of the given reason in namespace.
func waitEvent(ctx context.Context, c *sandbox.Cluster, namespace, reason string, timeout time.Duration) (corev1.Event, error) {
	var found corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil || len(evs.Items) == 0 {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		found = evs.Items[0]
		return true, nil
	})
	if err != nil {
		return found, fmt.Errorf("no %s Event in %s within %s: %w", reason, namespace, timeout, err)
	}
	return found, nil
}

// sleep is an observation window: the scenario watches time pass on
// purpose (nothing must happen), bounded by ctx.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// deployRecorded deploys each workload on its preferred node and returns its
// pods' UIDs by workload, to compare with after the scenario.
func deployRecorded(ctx context.Context, c *sandbox.Cluster, tl *Timeline, workloads []Workload) (map[string][]types.UID, error) {
	uids := map[string][]types.UID{}
	for _, w := range workloads {
		obsCtx, stop := context.WithCancel(ctx)
		err := deployOnPreferredNode(ctx, c, tl, Observe(obsCtx, c, tl, w), w)
		stop()
		if err != nil {
			return uids, err
		}
		if uids[w.String()], err = podUIDs(ctx, c, w); err != nil {
			return uids, err
		}
	}
	return uids, nil
}
