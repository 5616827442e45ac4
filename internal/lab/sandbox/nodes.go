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
