package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
)

// S11, the clock half: a kubelet whose clock is ten minutes behind
// reports its own node NotReady. kwok stops managing the node, and the
// scenario plays its kubelet: it posts Ready=False with every timestamp
// on the kubelet's clock (lastTransitionTime ten minutes in the past),
// and keeps posting heartbeats, so kube-controller-manager sees a node
// that is up and NotReady and leaves the condition alone. rebound must
// count maxUnavailableTime and the prune grace from its own first sight
// of the NotReady state: no action and no prune before then, and both
// after (so the scenario can fail either way).
//
// The caller runs `rebound controller --peering` under a policy that
// makes the workload critical.

// S11ClockOptions tune RunS11SkewedKubeletClock.
type S11ClockOptions struct {
	// Workload is the critical Deployment, first on Workload.PreferNode,
	// the node whose kubelet's clock is behind.
	Workload Workload
	// Skew is how far behind the kubelet's clock is (default 10 min).
	Skew time.Duration
	// PolicyTime and PruneGrace are the controller's maxUnavailableTime
	// and prune grace; the scenario waits for each up to Wait past it
	// (default 60 s).
	PolicyTime, PruneGrace time.Duration
	Wait                   time.Duration
	// Heartbeat is how often the kubelet posts its status (default 1 s,
	// well within the node monitor grace period).
	Heartbeat time.Duration
	// User is the controller's identity in the audit log.
	User string
	// PeerSet is where the controller publishes the set; zero means
	// rebound-system/rebound-peer-set.
	PeerSet types.NamespacedName
}

func (o S11ClockOptions) withDefaults() S11ClockOptions {
	if o.Skew == 0 {
		o.Skew = 10 * time.Minute
	}
	if o.Wait == 0 {
		o.Wait = 60 * time.Second
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = time.Second
	}
	if o.PeerSet.Name == "" {
		o.PeerSet = types.NamespacedName{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName}
	}
	return o
}

// S11ClockResult is what the scenario measured; times are the API's.
type S11ClockResult struct {
	// ReportedAt is when the kubelet's NotReady reached the API (the
	// status write's managedFields time, to the second): the earliest
	// rebound can have seen it. Reports counts the writes that had to
	// set the condition again (1 unless a late heartbeat of kwok's put
	// Ready back first; ReportedAt is then the last before the action).
	ReportedAt time.Time
	Reports    int
	// Transition is the lastTransitionTime the kubelet wrote, and
	// TransitionAtAction what the node carried when the action came
	// (the same, unless something else rewrote the condition).
	Transition, TransitionAtAction time.Time
	// FirstActionAt is the controller's first write to the workload (a
	// pod delete or a Deployment update), from the audit log; Action
	// names it. PrunedAt is when a watch first showed the node out of the
	// published set or labelled out (this machine's clock, which the
	// sandbox's API server shares; never before the controller's write).
	FirstActionAt time.Time
	Action        string
	PrunedAt      time.Time
	// ActionAfterReport and PruneAfterReport are the delays from
	// ReportedAt.
	ActionAfterReport, PruneAfterReport time.Duration
}

// RunS11SkewedKubeletClock plays the clock half on a running sandbox.
func RunS11SkewedKubeletClock(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S11ClockOptions) (S11ClockResult, error) {
	opts = opts.withDefaults()
	var res S11ClockResult
	w, node := opts.Workload, opts.Workload.PreferNode
	if !slices.Contains(c.NodeNames, node) {
		return res, fmt.Errorf("S11: %s is not a node of the sandbox (%v)", node, c.NodeNames)
	}
	for i, n := range c.NodeNames {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"10.90.0.%d/32"}}}`, peering.AnnotationCalicoIPv4, i+1)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return res, err
		}
	}
	if err := waitMembers(ctx, c, opts.PeerSet, 60*time.Second, "every node in the published set", func(m []string) bool { return len(m) == len(c.NodeNames) }); err != nil {
		return res, err
	}
	if err := waitLabelled(ctx, c, c.NodeNames); err != nil {
		return res, err
	}
	tl.Step("create %s on %s", w, node)
	if err := w.Create(ctx, c.Client); err != nil {
		return res, err
	}
	if err := waitPodReadyOn(ctx, c, w, node); err != nil {
		return res, err
	}

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	removals, err := recordRemovals(wctx, c, opts.PeerSet, []string{node})
	if err != nil {
		return res, err
	}
	tl.Step("kwok stops managing %s; its kubelet, %s behind, reports it NotReady", node, opts.Skew)
	if err := c.StopNode(ctx, node); err != nil {
		return res, err
	}
	k := &skewedKubelet{c: c, node: node, skew: opts.Skew, transition: time.Now().Add(-opts.Skew).Truncate(time.Second)}
	res.Transition = k.transition
	if err := k.post(ctx); err != nil {
		return res, err
	}
	kctx, stopKubelet := context.WithCancel(ctx)
	defer stopKubelet()
	go k.run(kctx, opts.Heartbeat)

	// The first action on the workload, from the audit log.
	actions := func() ([]sandbox.AuditEvent, error) {
		return c.AuditEvents(func(e sandbox.AuditEvent) bool {
			if e.User.Username != opts.User || e.ResponseStatus.Code >= 300 || e.ObjectRef.Namespace != w.Namespace {
				return false
			}
			return (e.Verb == "delete" && e.ObjectRef.Resource == "pods" && isPodOf(e.ObjectRef.Name, w)) ||
				((e.Verb == "update" || e.Verb == "patch") && e.ObjectRef.Resource == "deployments" && e.ObjectRef.Name == w.Name)
		})
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, opts.PolicyTime+opts.Wait, true, func(context.Context) (bool, error) {
		evs, err := actions()
		if err != nil || len(evs) == 0 {
			return false, err
		}
		first := evs[0]
		for _, e := range evs[1:] {
			if e.RequestReceivedTimestamp.Before(&first.RequestReceivedTimestamp) {
				first = e
			}
		}
		res.FirstActionAt = first.RequestReceivedTimestamp.Time
		res.Action = first.Verb + " " + first.ObjectRef.Resource + " " + first.ObjectRef.Name
		return true, nil
	})
	if err != nil {
		return res, fmt.Errorf("no action by %s on %s within %s of the NotReady report: %w", opts.User, w, opts.PolicyTime+opts.Wait, err)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	if cond := kubestatus.NodeReadyCondition(n); cond != nil {
		res.TransitionAtAction = cond.LastTransitionTime.Time
	}
	tl.Step("rebound: %s", res.Action)

	// The prune, as the watches saw it.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, opts.PruneGrace+opts.Wait, true, func(context.Context) (bool, error) {
		at, _, err := removals.removals()
		res.PrunedAt = at[node]
		return !res.PrunedAt.IsZero(), err
	})
	if err != nil {
		return res, fmt.Errorf("%s never left the peer set within %s of the NotReady report: %w", node, opts.PruneGrace+opts.Wait, err)
	}
	stopKubelet()
	if err := k.lastErr(); err != nil {
		return res, fmt.Errorf("the kubelet's heartbeats: %w", err)
	}
	res.ReportedAt, res.Reports = k.reportedBefore(res.FirstActionAt)
	res.ActionAfterReport = res.FirstActionAt.Sub(res.ReportedAt)
	res.PruneAfterReport = res.PrunedAt.Sub(res.ReportedAt)
	tl.Step("NotReady reported at %s (transition written %s); first action %s later, prune %s later",
		res.ReportedAt.UTC().Format(time.RFC3339), res.Transition.UTC().Format(time.RFC3339), res.ActionAfterReport, res.PruneAfterReport)
	return res, nil
}

// skewedKubelet posts a node's status as a kubelet with a slow clock
// would: Ready=False since transition, heartbeats on its own clock.
type skewedKubelet struct {
	c          *sandbox.Cluster
	node       string
	skew       time.Duration
	transition time.Time

	mu sync.Mutex
	// reported are the API's times of the writes that set the NotReady
	// condition anew (it was not what the kubelet reports before them).
	reported []time.Time
	err      error
}

// post writes the node's Ready condition: the kubelet's status update,
// a strategic merge on the conditions list (merged by type).
func (k *skewedKubelet) post(ctx context.Context) error {
	before, err := k.c.Client.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cond := kubestatus.NodeReadyCondition(before)
	anew := cond == nil || cond.Status != corev1.ConditionFalse || !cond.LastTransitionTime.Time.Equal(k.transition)
	now := metav1.NewTime(time.Now().Add(-k.skew))
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message:           "container runtime network not ready (scenario S11: the kubelet's clock is behind)",
		LastHeartbeatTime: now, LastTransitionTime: metav1.NewTime(k.transition),
	}}}})
	if err != nil {
		return err
	}
	after, err := k.c.Client.CoreV1().Nodes().Patch(ctx, k.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: scenarioFieldManager}, "status")
	if err != nil {
		return fmt.Errorf("post %s's status: %w", k.node, err)
	}
	if anew {
		at := managedFieldsTime(after.ManagedFields)
		if at.IsZero() {
			return fmt.Errorf("the status write of %s left no managedFields time", k.node)
		}
		k.mu.Lock()
		k.reported = append(k.reported, at)
		k.mu.Unlock()
	}
	return nil
}

func (k *skewedKubelet) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := k.post(ctx); err != nil && ctx.Err() == nil {
			k.mu.Lock()
			k.err = err
			k.mu.Unlock()
		}
	}
}

func (k *skewedKubelet) lastErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// reportedBefore is the last time the NotReady condition was set anew
// before t (the zero time when never), and how many times it was.
func (k *skewedKubelet) reportedBefore(t time.Time) (time.Time, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var last time.Time
	for _, at := range k.reported {
		if !at.After(t) && at.After(last) {
			last = at
		}
	}
	return last, len(k.reported)
}
