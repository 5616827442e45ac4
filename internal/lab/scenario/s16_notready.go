package scenario

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/internal/lab/sandbox"
)

// A node NotReady by its own kubelet's report while its Lease renews: a
// kubelet whose container runtime hangs (containerd or CRI-O stuck, PLEG
// unhealthy, a CNI config missing for a moment) reports its node NotReady
// and goes on renewing its Lease; its containers, BIRD among them, run
// on. Calico's own mesh keeps such a node. rebound's published set must
// keep it past the prune grace, whatever the backend (the BIRD agents',
// or Calico's BGPPeer with no session reports), and the node must never
// leave it while the Lease renews.

// NotReadyRenewingOptions tune RunNotReadyRenewing.
type NotReadyRenewingOptions struct {
	// Node reports NotReady; Reason is its Ready condition's reason
	// (default ContainerRuntimeDown).
	Node, Reason string
	// Hold is how long it stays NotReady (the test: past the prune grace,
	// three times over).
	Hold time.Duration
	// PeerSet is the published set to watch; Node must be in it, and
	// labelled in, at the start.
	PeerSet types.NamespacedName
}

// NotReadyRenewingResult is what RunNotReadyRenewing saw.
type NotReadyRenewingResult struct {
	// Removed says how and when (after the NotReady report) Node left
	// the set, "" if it never did.
	Removed string
	// NotReadyFor is how long the API had the node NotReady, from its
	// NotReady transition to its Ready one (the API's timestamps).
	NotReadyFor time.Duration
	// Renewals counts the Lease renewals seen while the node was NotReady.
	Renewals int
}

// RunNotReadyRenewing plays it on a running sandbox with a peering
// controller publishing at PeerSet.
func RunNotReadyRenewing(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts NotReadyRenewingOptions) (NotReadyRenewingResult, error) {
	var res NotReadyRenewingResult
	if opts.Reason == "" {
		opts.Reason = "ContainerRuntimeDown"
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	rec, err := recordRemovals(wctx, c, opts.PeerSet, []string{opts.Node})
	if err != nil {
		return res, err
	}
	from := time.Now()
	tl.Step("%s's kubelet reports NotReady (%s); its Lease renews on", opts.Node, opts.Reason)
	if err := c.ReportNotReady(ctx, opts.Node, opts.Reason); err != nil {
		return res, err
	}
	if err := c.WaitNodeReady(ctx, opts.Node, false, 30*time.Second); err != nil {
		return res, err
	}
	last, err := leaseRenewTime(ctx, c, opts.Node)
	if err != nil {
		return res, err
	}
	end := time.Now().Add(opts.Hold)
	for time.Now().Before(end) {
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return res, err
		}
		now, err := leaseRenewTime(ctx, c, opts.Node)
		if err != nil {
			return res, err
		}
		if now.After(last) {
			res.Renewals++
			last = now
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, opts.Node, metav1.GetOptions{})
		if err != nil {
			return res, err
		}
		if cond := readyCondition(n); cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != opts.Reason {
			return res, fmt.Errorf("the lab's NotReady did not hold: %s's Ready condition is now %+v", opts.Node, cond)
		}
	}
	if want := int(opts.Hold / (c.Timings.NodeLeaseDuration / 4) / 2); res.Renewals < want {
		return res, fmt.Errorf("%s's Lease renewed %d times in %s NotReady, want at least %d: the scenario did not play", opts.Node, res.Renewals, opts.Hold, want)
	}
	removed, how, err := rec.removals()
	if err != nil {
		return res, err
	}
	if at, ok := removed[opts.Node]; ok {
		res.Removed = fmt.Sprintf("%s at +%.1fs", how[opts.Node], at.Sub(from).Seconds())
	}
	tl.Step("%s NotReady for %s, its Lease renewed %d times; removed: %q", opts.Node, opts.Hold, res.Renewals, res.Removed)
	stop()

	tl.Step("%s's kubelet reports Ready again", opts.Node)
	if err := c.ReportReady(ctx, opts.Node); err != nil {
		return res, err
	}
	if err := c.WaitNodeReady(ctx, opts.Node, true, 30*time.Second); err != nil {
		return res, err
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, opts.Node, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	if back := readyCondition(n); back != nil {
		// The NotReady transition is the lab's own write, in whole seconds.
		res.NotReadyFor = back.LastTransitionTime.Sub(from.Truncate(time.Second))
	}
	return res, nil
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
