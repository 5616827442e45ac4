package scenario

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/sandbox"
)

// S9: a Deployment stays short for a long time. rebound deletes its
// stranded pod; the replacement never becomes available; after the
// replacement timeout rebound scale-bounces the Deployment, once. Then many
// other rescues push that bounce out of the policy's 10-record
// status.lastActions, and the Deployment is still short: it must not be
// bounced again (the Deployment itself records the bounce for the
// incident). Expects `rebound controller` to run with a short
// --replacement-timeout under a policy that makes the workloads critical.

// S9Options tune RunS9.
type S9Options struct {
	// Short is the Deployment that stays short: first on its PreferNode;
	// RunS9 sets a MinReadySeconds of 500 s (below the default progress
	// deadline of 600 s, as the API requires), so that no pod of it counts
	// as available during the test.
	Short Workload
	// Others are critical Deployments on OthersNode, which dies after the
	// bounce: each rescue is one more action in status.lastActions.
	Others     []Workload
	OthersNode string
	// Survivor is the node that stays Ready.
	Survivor string
	// ObserveAfter is how long to keep watching once every other
	// workload is back (well past the replacement timeout).
	ObserveAfter time.Duration
	// User is the identity rebound acts as, to count its writes in the
	// audit log.
	User string
}

// S9Result is what RunS9 counted in the apiserver's audit log.
type S9Result struct {
	// ShortUpdates counts rebound's writes to the short Deployment (a
	// bounce is two: scale to 0, and back); Bounces is how many bounces
	// they make.
	ShortUpdates int `json:"shortUpdates"`
	Bounces      int `json:"bounces"`
	// OtherDeletes counts rebound's deletions of the other workloads'
	// pods: the actions that pushed the bounce out of the history.
	OtherDeletes int `json:"otherDeletes"`
	// BouncedFor is the Deployment's rebound.dev/scale-bounced-for.
	BouncedFor string `json:"bouncedFor"`
}

// RunS9 plays S9 on a running sandbox of 5+ nodes.
func RunS9(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S9Options) (S9Result, error) {
	var res S9Result
	grace := c.Timings.NodeMonitorGracePeriod
	short := opts.Short
	short.MinReadySeconds = 500
	// Only its first node and the survivor: a pod of it on OthersNode
	// would be stranded again by a second, later incident.
	short.AllowedNodes = []string{short.PreferNode, opts.Survivor}
	tl.Step("create %s (never available in the test: minReadySeconds 500 s) on %s and %d critical Deployments on %s",
		short, short.PreferNode, len(opts.Others), opts.OthersNode)
	if err := short.Create(ctx, c.Client); err != nil {
		return res, err
	}
	if err := waitPodReadyOn(ctx, c, short, short.PreferNode); err != nil {
		return res, err
	}
	for _, w := range opts.Others {
		if err := w.Create(ctx, c.Client); err != nil {
			return res, err
		}
	}
	for _, w := range opts.Others {
		if err := waitPodReadyOn(ctx, c, w, opts.OthersNode); err != nil {
			return res, err
		}
	}

	var first []string
	for _, n := range c.NodeNames {
		if n != opts.Survivor && n != opts.OthersNode {
			first = append(first, n)
		}
	}
	tl.Step("stop %v: %s's pod is stranded", first, short)
	for _, n := range first {
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	shortWrites := func() (int, error) {
		evs, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
			return e.User.Username == opts.User && e.ObjectRef.Resource == "deployments" && e.ObjectRef.Name == short.Name &&
				(e.Verb == "update" || e.Verb == "patch") && e.ResponseStatus.Code < 300
		})
		return len(evs), err
	}
	tl.Step("wait for rebound's one scale bounce of %s (scale to 0 and back)", short)
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, grace+3*time.Minute, true, func(context.Context) (bool, error) {
		n, err := shortWrites()
		return n >= 2, err
	}); err != nil {
		return res, fmt.Errorf("no scale bounce of %s: %w", short, err)
	}

	tl.Step("stop %s: %d more rescues push the bounce out of status.lastActions", opts.OthersNode, len(opts.Others))
	if err := c.StopNode(ctx, opts.OthersNode); err != nil {
		return res, err
	}
	for _, w := range opts.Others {
		obsCtx, stop := context.WithCancel(ctx)
		_, err := Observe(obsCtx, c, tl, w).WaitFor(ctx, grace+4*time.Minute, w.String()+" available on "+opts.Survivor, func(s Snapshot) bool {
			return s.AvailableOn(opts.Survivor)
		})
		stop()
		if err != nil {
			return res, err
		}
	}
	tl.Step("every other workload back on %s; watch %s more: %s is still short", opts.Survivor, opts.ObserveAfter, short)
	if err := sleep(ctx, opts.ObserveAfter); err != nil {
		return res, err
	}

	var err error
	if res.ShortUpdates, err = shortWrites(); err != nil {
		return res, err
	}
	res.Bounces = (res.ShortUpdates + 1) / 2
	others := map[string]bool{}
	for _, w := range opts.Others {
		others[w.Namespace+"/"+w.Name] = true
	}
	deletes, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		return e.User.Username == opts.User && e.Verb == "delete" && e.ObjectRef.Resource == "pods" && e.ResponseStatus.Code < 300
	})
	if err != nil {
		return res, err
	}
	for _, d := range deletes {
		if d.ObjectRef.Name != "" && d.ObjectRef.Namespace != "" && !isPodOf(d.ObjectRef.Name, short) {
			res.OtherDeletes++
		}
	}
	d, err := c.Client.AppsV1().Deployments(short.Namespace).Get(ctx, short.Name, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	res.BouncedFor = d.Annotations["rebound.dev/scale-bounced-for"]
	tl.Step("%s: %d write(s) by rebound = %d bounce(s), bounced for the incident of %s; %d other pods deleted",
		short, res.ShortUpdates, res.Bounces, res.BouncedFor, res.OtherDeletes)
	return res, nil
}

// isPodOf tells a Deployment's pods by their generated name prefix.
func isPodOf(pod string, w Workload) bool {
	return len(pod) > len(w.Name)+1 && pod[:len(w.Name)+1] == w.Name+"-"
}

// waitPodReadyOn waits until the workload has a Ready pod on node (not
// necessarily available: S9's never is).
func waitPodReadyOn(ctx context.Context, c *sandbox.Cluster, w Workload, node string) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := readyPodSince(ctx, c, w, node)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s: no Ready pod on %s: %w", w, node, err)
	}
	return nil
}
