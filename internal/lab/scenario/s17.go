package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/fencing"
	"rebound/pkg/kubestatus"
	"rebound/pkg/rescue"
)

// S17 is "a stateful pod on a dead node": a one-replica StatefulSet whose
// pod mounts a ReadWriteOnce volume (S5's stand-in) runs on a node whose
// host dies: its Lease stops, its host goes silent, its agent stops.
// Upstream never moves it: taint eviction deletes it after 300 s, but no
// kubelet confirms the deletion, so the pod stays bound to the node and
// the StatefulSet makes no other. With rebound, the node's agent runs
// watchdog self-fencing (the lab's stand-in watchdog): the controller
// proves that the node cannot be feeding its watchdog, puts
// node.kubernetes.io/out-of-service on it, verifies, and the pod is
// force-deleted and runs elsewhere; when the node comes back on a new boot,
// the taint comes off.
//
// The caller starts the sandbox at the default timings, rebound (when
// Agents is set: `rebound controller --lease-plane` under S17Policy, and
// the gossiping agents with GossipAgentOptions.Fencing), and RunS17 plays
// the rest.

// S17Policy makes kube-system's system-cluster-critical pods critical,
// judged on both planes with no wait, and lets rebound fence nodes whose
// agents run a watchdog.
const S17Policy = `apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: s17
spec:
  critical:
    namespaces: [kube-system]
    priorityClassNames: [system-cluster-critical]
  detection: TwoPlanes
  maxUnavailableTime: 0s
  actions: [DeleteAndReplace]
  fencing:
    mode: Watchdog
  limits:
    maxActionsPerMinute: 10
    maxConcurrent: 5
`

// S17Options tune RunS17.
type S17Options struct {
	// Node is where the stateful pod runs and whose host dies (default
	// node-3).
	Node string
	// Agents are the gossiping agents, with fencing; nil plays the lane
	// without rebound.
	Agents map[string]*GossipAgent
	// Hold is how long the lane without rebound watches the pod stay on
	// the dead node (default 360 s).
	Hold time.Duration
	// RescueTimeout bounds the wait, from the death, for the pod to run
	// elsewhere with rebound (default 3 minutes).
	RescueTimeout time.Duration
}

// S17Result is what RunS17 found. Times are the API's.
type S17Result struct {
	// DiedAt is the death as the API dates it (the Event the lab wrote in
	// that instant).
	DiedAt time.Time `json:"diedAt"`
	// FenceWait is T + 2W + margin for the node, from its agent's report:
	// how long after its own read of the node dead on both planes the
	// controller may fence it.
	FenceWait time.Duration `json:"fenceWait,omitempty"`
	// FencedAt is the out-of-service taint's timeAdded (whole seconds).
	FencedAt time.Time `json:"fencedAt,omitzero"`
	// RunningElsewhere is from the death to the replacement's Ready
	// transition, on MovedTo.
	RunningElsewhere time.Duration `json:"runningElsewhere,omitempty"`
	MovedTo          string        `json:"movedTo,omitempty"`
	// StillOnNode is, in the lane without rebound, how long after the
	// death the pod was seen still bound to the dead node, with no copy
	// Running elsewhere.
	StillOnNode time.Duration `json:"stillOnNode,omitempty"`
	// ReturnedAt is the node's return on a new boot; TaintRemoved is from
	// it to the controller's FencingUntainted Event (the API's times, whole seconds).
	ReturnedAt   time.Time     `json:"returnedAt,omitzero"`
	TaintRemoved time.Duration `json:"taintRemoved,omitempty"`
}

// RunS17Pair plays S17 on both lanes at once: p.Without without rebound,
// watched for hold; p.With with rebound's agents.
func RunS17Pair(ctx context.Context, p Pair, agents map[string]*GossipAgent, hold time.Duration) (without, with S17Result, err error) {
	return runPair(p, func(c *sandbox.Cluster, tl *Timeline, rebound bool) (S17Result, error) {
		if rebound {
			return RunS17(ctx, c, tl, S17Options{Agents: agents})
		}
		return RunS17(ctx, c, tl, S17Options{Hold: hold})
	})
}

// RunS17 plays S17 on a running sandbox.
func RunS17(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S17Options) (S17Result, error) {
	var res S17Result
	if opts.Node == "" {
		opts.Node = "node-3"
	}
	if opts.Hold == 0 {
		opts.Hold = 360 * time.Second
	}
	if opts.RescueTimeout == 0 {
		opts.RescueTimeout = 3 * time.Minute
	}
	agent := opts.Agents[opts.Node]
	if opts.Agents != nil {
		if agent == nil {
			return res, fmt.Errorf("S17: %s has no agent", opts.Node)
		}
		tl.Step("wait until every agent reports its watchdog armed, counting against a list of all %d nodes", len(opts.Agents))
		if err := WaitFencingArmed(ctx, c, opts.Agents, 2*time.Minute); err != nil {
			return res, err
		}
	}
	uid, err := placeStatefulStandIn(ctx, c, tl, opts.Node)
	if err != nil {
		return res, err
	}
	if agent != nil {
		if res.FenceWait, err = fenceWait(ctx, c, opts.Node); err != nil {
			return res, err
		}
		tl.Add("node", opts.Node, "armed (its agent's report); if it dies, rebound may fence it no sooner than T + 2W + margin = %.1fs after it reads it dead on both planes", res.FenceWait.Seconds())
	}

	tl.Step("%s's host dies: its Lease stops, its host goes silent, its agent stops", opts.Node)
	if res.DiedAt, err = markDeath(ctx, c, opts.Node); err != nil {
		return res, err
	}
	if err := c.StopNode(ctx, opts.Node); err != nil {
		return res, err
	}
	if agent != nil {
		if err := agent.HostDeath(); err != nil {
			return res, err
		}
	}

	if opts.Agents == nil {
		return res, holdOnDeadNode(ctx, c, tl, opts, uid, &res)
	}

	taint := watchTaint(ctx, c, opts.Node, func(t *corev1.Taint) {
		if t.TimeAdded != nil {
			tl.Add("node", opts.Node, "fenced: %s=%s:%s (timeAdded +%.0fs after the death)", t.Key, t.Value, t.Effect, t.TimeAdded.Sub(res.DiedAt).Seconds())
		}
	})
	moved, err := waitPod(ctx, c, time.Until(res.DiedAt.Add(opts.RescueTimeout)), func(p *corev1.Pod) bool {
		return p.UID != uid && p.Spec.NodeName != "" && p.Spec.NodeName != opts.Node && kubestatus.PodReady(p)
	})
	if err != nil {
		return res, fmt.Errorf("S17: %w", err)
	}
	_, readySince := kubestatus.PodReadySince(moved)
	res.MovedTo, res.RunningElsewhere = moved.Spec.NodeName, readySince.Sub(res.DiedAt)
	if t := taint(); t != nil && t.TimeAdded != nil {
		res.FencedAt = t.TimeAdded.Time
	}
	tl.Add("pod", moved.Name, "Running and Ready on %s, %.1fs after the death", res.MovedTo, res.RunningElsewhere.Seconds())

	tl.Step("%s comes back on a new boot", opts.Node)
	if err := agent.Return(ctx); err != nil {
		return res, err
	}
	if res.ReturnedAt, err = markEvent(ctx, c, opts.Node, "LabReturn", "the lab: the node comes back on a new boot ("+agent.BootID()+")"); err != nil {
		return res, err
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, opts.Node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		return !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return rescue.IsFencingTaint(&t) }), nil
	})
	if err != nil {
		return res, fmt.Errorf("S17: the out-of-service taint is still on %s 2 minutes after it came back on a new boot: %w", opts.Node, err)
	}
	// The API dates the removal: the controller's FencingUntainted Event,
	// written as it takes the taint off.
	removedAt, err := untaintedAt(ctx, c, opts.Node, res.ReturnedAt)
	if err != nil {
		return res, err
	}
	res.TaintRemoved = removedAt.Sub(res.ReturnedAt)
	tl.Add("node", opts.Node, "back on a new boot; the out-of-service taint is off %.0fs after the return (the API's times, whole seconds)", res.TaintRemoved.Seconds())
	return res, nil
}

// untaintedAt returns the creation time of the controller's
// FencingUntainted Event about node at or after since.
func untaintedAt(ctx context.Context, c *sandbox.Cluster, node string, since time.Time) (time.Time, error) {
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=FencingUntainted,involvedObject.name=" + node})
		if err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		for _, e := range evs.Items {
			if t := e.CreationTimestamp.Time; !t.Before(since.Truncate(time.Second)) && (at.IsZero() || t.Before(at)) {
				at = t
			}
		}
		return !at.IsZero(), nil
	})
	if err != nil {
		return at, fmt.Errorf("S17: no FencingUntainted Event about %s since its return: %w", node, err)
	}
	return at, nil
}

// holdOnDeadNode is the lane without rebound: it watches, for opts.Hold
// from the death, that the pod stays bound to the dead node and that no
// copy runs elsewhere.
func holdOnDeadNode(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S17Options, uid types.UID, res *S17Result) error {
	tl.Step("without rebound: watch the pod for %s from the death", opts.Hold)
	until := res.DiedAt.Add(opts.Hold)
	err := wait.PollUntilContextTimeout(ctx, time.Second, opts.Hold+time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=etcd-standin"})
		if err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		for _, p := range pods.Items {
			if p.UID != uid && p.Spec.NodeName != opts.Node && kubestatus.PodReady(&p) {
				return false, fmt.Errorf("S17 without rebound: %s runs on %s %s after the death: upstream moved it", p.Name, p.Spec.NodeName, time.Since(res.DiedAt).Round(time.Second))
			}
		}
		if !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.UID == uid && p.Spec.NodeName == opts.Node }) {
			return false, fmt.Errorf("S17 without rebound: the pod left %s %s after the death", opts.Node, time.Since(res.DiedAt).Round(time.Second))
		}
		res.StillOnNode = time.Since(res.DiedAt)
		return !time.Now().Before(until), nil
	})
	if err != nil {
		return err
	}
	tl.Add("pod", S5Pod, "still bound to %s, %.0fs after the death; no copy elsewhere", opts.Node, res.StillOnNode.Seconds())
	return nil
}

// fenceWait reads the node's fencing report and returns T + 2W + margin.
func fenceWait(ctx context.Context, c *sandbox.Cluster, node string) (time.Duration, error) {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return 0, err
	}
	var r v1alpha1.PeeringReport
	if err := cl.Get(ctx, client.ObjectKey{Name: node}, &r); err != nil {
		return 0, err
	}
	if r.Fencing == nil {
		return 0, fmt.Errorf("%s's agent reports no fencing", node)
	}
	t := fencing.Timing{Watchdog: time.Duration(r.Fencing.WatchdogSeconds) * time.Second, Sanction: time.Duration(r.Fencing.SanctionSeconds) * time.Second}
	return t.FenceWait(fencing.DefaultFenceMargin), nil
}

// watchTaint polls node's out-of-service taint until it is seen (then
// calls seenNow) or ctx ends; the function returns it once seen.
func watchTaint(ctx context.Context, c *sandbox.Cluster, node string, seenNow func(*corev1.Taint)) func() *corev1.Taint {
	var (
		seen = make(chan *corev1.Taint, 1)
		got  *corev1.Taint
	)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // poll on
			}
			for i := range n.Spec.Taints {
				if n.Spec.Taints[i].Key == corev1.TaintNodeOutOfService {
					seenNow(&n.Spec.Taints[i])
					seen <- &n.Spec.Taints[i]
					return true, nil
				}
			}
			return false, nil
		})
	}()
	return func() *corev1.Taint {
		if got == nil {
			select {
			case got = <-seen:
			default:
			}
		}
		return got
	}
}

// WaitFencingArmed waits until every agent's report says its watchdog is
// armed on the node's current boot, counting against a list that holds
// every agent's node.
func WaitFencingArmed(ctx context.Context, c *sandbox.Cluster, agents map[string]*GossipAgent, timeout time.Duration) error {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return err
	}
	last := "no report read"
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for n, a := range agents {
			var r v1alpha1.PeeringReport
			if err := cl.Get(ctx, client.ObjectKey{Name: n}, &r); err != nil {
				last = fmt.Sprintf("%s: %v", n, err)
				return false, nil
			}
			f := r.Fencing
			switch {
			case f == nil:
				last = n + ": no fencing report"
				return false, nil
			case !f.Armed || f.BootID != a.BootID():
				last = fmt.Sprintf("%s: armed %v on boot %q (%s)", n, f.Armed, f.BootID, f.Reason)
				return false, nil
			}
			full := false
			for _, l := range f.Lists {
				if len(l.Members) >= len(agents) {
					full = true
				}
			}
			if !full {
				last = fmt.Sprintf("%s: lists %v", n, f.Lists)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the agents' watchdogs did not all arm within %s (last: %s): %w", timeout, last, err)
	}
	return nil
}

// placeStatefulStandIn creates S5's StatefulSet and waits until its pod
// is Ready on node. The pod only prefers node (it must be free to move
// once the node is fenced), and the scheduler's other scores can outweigh
// a preference: the other nodes are cordoned until it lands.
func placeStatefulStandIn(ctx context.Context, c *sandbox.Cluster, tl *Timeline, node string) (types.UID, error) {
	return placeStatefulSet(ctx, c, tl, "etcd-standin", node)
}

// placeStatefulSet is placeStatefulStandIn for StatefulSet name.
func placeStatefulSet(ctx context.Context, c *sandbox.Cluster, tl *Timeline, name, node string) (types.UID, error) {
	var others []string
	for _, n := range c.NodeNames {
		if n != node {
			others = append(others, n)
		}
	}
	for _, n := range others {
		if _, err := setUnschedulable(ctx, c, n, true); err != nil {
			return "", err
		}
	}
	tl.Step("create StatefulSet kube-system/%s (ReadWriteOnce volume), preferring %s (the others cordoned until it lands)", name, node)
	if err := createStatefulSet(ctx, c, name, node); err != nil {
		return "", err
	}
	pod, err := waitPodNamed(ctx, c, name+"-0", 2*time.Minute, func(p *corev1.Pod) bool {
		return p.Spec.NodeName == node && kubestatus.PodReady(p)
	})
	if err != nil {
		return "", err
	}
	for _, n := range others {
		if _, err := setUnschedulable(ctx, c, n, false); err != nil {
			return "", err
		}
	}
	tl.Add("pod", pod.Name, "Running and Ready on %s", node)
	return pod.UID, nil
}
