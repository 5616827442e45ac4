package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
)

// S15 is "a control-plane stall and its edges": every kubelet's path to
// the API stops (kwok stops heartbeating every node) for longer than the
// node grace period plus the policy's maxUnavailableTime, at once or one
// node after another, and then the kubelets come back one after another.
// kube-controller-manager evicts nothing: it enters full disruption, and
// after it a node needs its whole node grace and its toleration again.
// rebound must delete nothing and take no peer out at the start, in the
// middle or at the end, while a node that really died in the stall (it
// does not come back) is rescued after it.
//
// The caller starts `rebound controller` (the test: --lease-plane, and
// --peering to watch the published set) under a policy that makes the
// workloads critical; the runner counts nothing itself but the published
// set's removals, so each check belongs to the test.

// S15Options tune RunS15.
type S15Options struct {
	// Workloads are critical Deployments, each first on its PreferNode.
	Workloads []Workload
	// StopStagger is the time between two kubelets losing the API (0: all
	// at once); ReturnStagger between two coming back.
	StopStagger, ReturnStagger time.Duration
	// Stall is how long every kubelet is cut off, from the last one's
	// stop to the first one's return.
	Stall time.Duration
	// StaysDown names a node that does not come back: it died in the
	// stall ("" for none).
	StaysDown string
	// PeerSet, when set, is the published peer set to watch for removals.
	PeerSet types.NamespacedName
}

// S15Result is what RunS15 found. Times are the API's.
type S15Result struct {
	// Before and After map each workload to its live pods' UIDs, before the
	// stall and once the nodes are back (and the dead node's workloads
	// replaced).
	Before, After map[string][]types.UID
	// StallEnd is the first Ready transition after the heal: when
	// kube-controller-manager left full disruption.
	StallEnd time.Time
	// DeadRescued is, for the workloads of StaysDown, StallEnd to their
	// replacement's Ready transition (the slowest of them).
	DeadRescued time.Duration
	// RemovedPeers are the nodes that left the published set, in order,
	// "" entries never; the node that stays down may leave once the
	// nodes are back (it is dead), and is not counted before then.
	RemovedPeers []string
}

// RunS15 plays S15 on a running sandbox.
func RunS15(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S15Options) (S15Result, error) {
	res := S15Result{After: map[string][]types.UID{}}
	grace := c.Timings.NodeMonitorGracePeriod
	var err error
	if res.Before, err = deployRecorded(ctx, c, tl, opts.Workloads); err != nil {
		return res, err
	}
	var peers *peerRemovals
	if opts.PeerSet.Name != "" {
		var err error
		if peers, err = watchPeerRemovals(ctx, c, opts.PeerSet); err != nil {
			return res, err
		}
	}

	how := "at once"
	if opts.StopStagger > 0 {
		how = fmt.Sprintf("one every %s", opts.StopStagger)
	}
	tl.Step("every kubelet loses the API, %s (%s)", how, strings.Join(c.NodeNames, ", "))
	for i, n := range c.NodeNames {
		if i > 0 {
			if err := sleep(ctx, opts.StopStagger); err != nil {
				return res, err
			}
		}
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	lastStop := time.Now()
	for _, n := range c.NodeNames {
		if err := c.WaitNodeReady(ctx, n, false, grace+time.Minute); err != nil {
			return res, err
		}
	}
	tl.Step("every node NotReady: kube-controller-manager is in full disruption")
	if err := sleep(ctx, time.Until(lastStop.Add(opts.Stall))); err != nil {
		return res, err
	}

	// The workloads' nodes come back last: their pods are the ones an
	// early judgement would delete.
	order := slices.Clone(c.NodeNames)
	hosts := map[string]bool{}
	for _, w := range opts.Workloads {
		hosts[w.PreferNode] = true
	}
	slices.SortStableFunc(order, func(a, b string) int { return boolCompare(hosts[a], hosts[b]) })
	var back []string
	for _, n := range order {
		if n == opts.StaysDown {
			continue
		}
		if len(back) > 0 {
			if err := sleep(ctx, opts.ReturnStagger); err != nil {
				return res, err
			}
		}
		tl.Step("%s's kubelet reaches the API again", n)
		if err := c.StartNode(ctx, n); err != nil {
			return res, err
		}
		back = append(back, n)
	}
	for _, n := range back {
		if err := c.WaitNodeReady(ctx, n, true, grace+time.Minute); err != nil {
			return res, err
		}
	}
	if res.StallEnd, err = stallEnd(ctx, c, back); err != nil {
		return res, err
	}
	if peers != nil {
		peers.ignoreFrom(opts.StaysDown, res.StallEnd)
	}
	tl.Step("every node but %q back; the stall ended at %s (API)", opts.StaysDown, res.StallEnd.Format(time.RFC3339))

	for _, w := range opts.Workloads {
		obsCtx, stop := context.WithCancel(ctx)
		_, err := Observe(obsCtx, c, tl, w).WaitFor(ctx, grace+2*time.Minute, w.String()+" available", func(s Snapshot) bool {
			return s.Desired > 0 && s.Available >= s.Desired && !slices.Contains(s.PodNodes(), opts.StaysDown)
		})
		stop()
		if err != nil {
			return res, err
		}
		if res.After[w.String()], err = podUIDs(ctx, c, w); err != nil {
			return res, err
		}
		if w.PreferNode != opts.StaysDown {
			continue
		}
		ready, err := readyPodSinceOffNode(ctx, c, w, opts.StaysDown)
		if err != nil {
			return res, err
		}
		res.DeadRescued = max(res.DeadRescued, ready.Sub(res.StallEnd))
	}
	if opts.StaysDown != "" {
		tl.Step("the workloads of %s, which died in the stall, Ready elsewhere %s after the stall's end", opts.StaysDown, res.DeadRescued)
	}
	if peers != nil {
		res.RemovedPeers = peers.removed()
	}
	return res, nil
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// stallEnd reads the stall's end from the API: the earliest Ready
// transition of the nodes back.
func stallEnd(ctx context.Context, c *sandbox.Cluster, back []string) (time.Time, error) {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return time.Time{}, err
	}
	var end time.Time
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ready, since := kubestatus.NodeReadySince(n)
		if ready && slices.Contains(back, n.Name) && (end.IsZero() || since.Before(end)) {
			end = since
		}
	}
	if end.IsZero() {
		return end, fmt.Errorf("S15: no node back is Ready")
	}
	return end, nil
}

// readyPodSinceOffNode is the Ready transition of the workload's live pod
// that is not on node.
func readyPodSinceOffNode(ctx context.Context, c *sandbox.Cluster, w Workload, node string) (time.Time, error) {
	pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
	if err != nil {
		return time.Time{}, err
	}
	var seen []string
	for i := range pods.Items {
		p := &pods.Items[i]
		seen = append(seen, fmt.Sprintf("%s on %q %s deleting=%v", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil))
		if p.Spec.NodeName == node || p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return cond.LastTransitionTime.Time, nil
			}
		}
	}
	// Where its pods are says what held the rescue (none deleted, or a
	// replacement bound to a node that cannot run it).
	return time.Time{}, fmt.Errorf("%s has no Ready pod off %s; its pods: %s", w, node, strings.Join(seen, ", "))
}

// peerRemovals records every member that leaves the published set.
type peerRemovals struct {
	mu      sync.Mutex
	names   []string
	left    map[string]time.Time
	ignore  string
	ignored time.Time
}

func (p *peerRemovals) ignoreFrom(node string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ignore, p.ignored = node, at
}

func (p *peerRemovals) removed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, n := range p.names {
		if n == p.ignore && p.ignore != "" && !p.left[n].Before(p.ignored) {
			continue
		}
		out = append(out, n)
	}
	return out
}

func watchPeerRemovals(ctx context.Context, c *sandbox.Cluster, set types.NamespacedName) (*peerRemovals, error) {
	w, err := c.Client.CoreV1().ConfigMaps(set.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", set.Name).String()})
	if err != nil {
		return nil, fmt.Errorf("watch the published peer set: %w", err)
	}
	p := &peerRemovals{left: map[string]time.Time{}}
	go func() {
		defer w.Stop()
		var prev []string
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			s, err := peering.ParsePeerSet(cm.Data[peering.PeerSetKey])
			if err != nil {
				continue
			}
			cur := Members(&s)
			p.mu.Lock()
			for _, n := range prev {
				if !slices.Contains(cur, n) {
					p.names = append(p.names, n)
					p.left[n] = time.Now()
				}
			}
			p.mu.Unlock()
			prev = cur
		}
	}()
	return p, nil
}
