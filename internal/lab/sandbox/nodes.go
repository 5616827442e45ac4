package sandbox

import (
	"context"
	"fmt"
	"time"

	"rebound/pkg/kubestatus"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// HeartbeatLabel selects the nodes kwok manages. A node whose label is not
// "on" gets no Lease renewals and no status updates: to the control plane it
// is exactly a node whose kubelet (or whole machine) has died. Its pods stay
// bound to it, as they would.
const HeartbeatLabel = "sandbox.rebound.dev/heartbeat"

const (
	heartbeatOn  = "on"
	heartbeatOff = "off"
)

// NodeName returns the name of the i-th fake node.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// StopNode makes a node die: its heartbeats stop, and after the node
// monitor grace period the node lifecycle controller marks it NotReady.
func (c *Cluster) StopNode(ctx context.Context, name string) error {
	return c.setHeartbeat(ctx, name, heartbeatOff)
}

// StartNode brings a stopped node back: kwok takes its Lease again and
// reports it Ready, and its pods Ready again.
func (c *Cluster) StartNode(ctx context.Context, name string) error {
	return c.setHeartbeat(ctx, name, heartbeatOn)
}

func (c *Cluster) setHeartbeat(ctx context.Context, name, value string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, HeartbeatLabel, value)
	_, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("sandbox: no node %q (nodes are %v)", name, c.NodeNames)
	}
	if err != nil {
		return fmt.Errorf("sandbox: set heartbeat of %s to %s: %w", name, value, err)
	}
	return nil
}

// WaitNodeReady waits until the node's Ready condition is True (ready) or
// anything else (!ready).
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, ready bool, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling through apiserver hiccups
		}
		return kubestatus.NodeReady(n) == ready, nil
	})
	if err != nil {
		want := "Ready"
		if !ready {
			want = "NotReady"
		}
		return fmt.Errorf("sandbox: node %s not %s within %s: %w", name, want, timeout, err)
	}
	return nil
}

// KubeletReportLabel, on a node, makes kwok leave its Ready condition as
// ReportNotReady wrote it, while it goes on renewing the node's Lease.
const KubeletReportLabel = "sandbox.rebound.dev/kubelet-report"

// ReportNotReady makes the node's kubelet report NotReady itself, with
// reason (e.g. "ContainerRuntimeDown", as a kubelet whose runtime hangs
// reports), while its Lease keeps renewing: the node is alive and talks to
// the API, its containers run on. ReportReady undoes it.
func (c *Cluster) ReportNotReady(ctx context.Context, name, reason string) error {
	label := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"NotReady"}}}`, KubeletReportLabel)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, label, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("sandbox: label %s's kubelet report: %w", name, err)
	}
	now := metav1.Now().UTC().Format(time.RFC3339)
	status := fmt.Appendf(nil, `{"status":{"conditions":[{"type":"Ready","status":"False","reason":%q,"message":"the lab: the kubelet reports its node NotReady","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, reason, now, now)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("sandbox: report %s NotReady: %w", name, err)
	}
	return nil
}

// ReportReady ends ReportNotReady: kwok reports the node Ready again.
func (c *Cluster) ReportReady(ctx context.Context, name string) error {
	label := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null}}}`, KubeletReportLabel)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, label, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("sandbox: unlabel %s's kubelet report: %w", name, err)
	}
	return nil
}
