package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"rebound/internal/lab/report"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/unreachable"
	"rebound/pkg/zone"
)

// S13: fast detection. A node dies outright: its Lease stops (kwok stops
// renewing it) and at the same instant its host goes silent (its kubelet
// port's stand-in drops every packet) and its agent freezes. Upstream
// notices only at the end of its node grace period; rebound's controller
// knows from two independent planes (the Lease on its own clock, and the
// agents' gossip) about one renew interval after death, taints the node,
// marks its pods not ready and, for a policy with detection TwoPlanes,
// deletes the critical pod so that its replacement starts at once.

// UnreachableTaint is the taint rebound puts on a node dead on both
// planes (pkg/unreachable).
const UnreachableTaint = unreachable.TaintKey

// S13Policy is the RecoveryPolicy of S13's lane with rebound: the critical
// stand-in moves the moment its node is dead on both planes
// (detection TwoPlanes, maxUnavailableTime 0s), not at the end of the
// node grace period.
const S13Policy = `apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: s13
spec:
  critical:
    namespaces: [kube-system]
    priorityClassNames: [system-cluster-critical]
  detection: TwoPlanes
  maxUnavailableTime: 0s
  actions: [DeleteAndReplace]
  fencing:
    mode: OutOfServiceTaint
  limits:
    maxActionsPerMinute: 10
    maxConcurrent: 5
`

// S13Service is the Service whose endpoints S13 watches.
const S13Service = "s13"

// s13EndpointLabel puts a pod behind S13Service.
var s13EndpointLabel = map[string]string{"rebound.dev/s13": "endpoint"}

// S13Options tune S13 on one lane.
type S13Options struct {
	// Workload is the critical Deployment; its one pod goes on
	// Workload.PreferNode, the node that dies.
	Workload Workload
	// Peer is the node of the Service's other endpoint (a bare pod).
	Peer string
	// KillAgent, when set, is the rest of the node's death
	// (GossipAgent.HostDeath: its host silent, its agent frozen): it runs
	// in the same instant as the Lease stops. Nil in the lane without
	// rebound, which has no agents.
	KillAgent func() error
	// Timeout bounds the wait for the replacement.
	Timeout time.Duration
}

// S13Result is what S13 measured on one lane, each time from the death.
type S13Result struct {
	// DiedAt is when the node died (the runner's clock, just before the
	// Lease stopped).
	DiedAt time.Time `json:"diedAt"`
	// Verdict is when the lane's detector acted on the death, from the
	// API's timestamps (whole seconds): the taint rebound.dev/unreachable's
	// timeAdded with rebound, the node's NotReady transition without.
	Verdict   time.Duration `json:"verdict"`
	VerdictBy string        `json:"verdictBy"`
	// EndpointsOff is when the dead node's endpoint stopped being ready in
	// the Service's EndpointSlices, as a watch saw it.
	EndpointsOff time.Duration `json:"endpointsOff"`
	// Replaced is true when a replacement pod was Ready on another node;
	// ReplacementReady is its Ready condition's lastTransitionTime (whole
	// seconds), Replacement its name.
	Replaced         bool          `json:"replaced"`
	ReplacementReady time.Duration `json:"replacementReady"`
	Replacement      string        `json:"replacement,omitempty"`
}

// RunS13 plays S13 on a running sandbox: it deploys the workload and the
// Service, kills the workload's node, and measures.
func RunS13(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S13Options) (S13Result, error) {
	var res S13Result
	w := opts.Workload
	victim := w.PreferNode
	for _, n := range []string{victim, opts.Peer} {
		if !slices.Contains(c.NodeNames, n) {
			return res, fmt.Errorf("S13: no node %q in the sandbox (nodes are %v)", n, c.NodeNames)
		}
	}
	w.PodLabels = s13EndpointLabel
	obs := Observe(ctx, c, tl, w)
	if err := deployOnPreferredNode(ctx, c, tl, obs, w); err != nil {
		return res, err
	}
	if err := s13Service(ctx, c, w.Namespace, opts.Peer); err != nil {
		return res, err
	}
	tl.Step("Service %s has ready endpoints on %s and %s", S13Service, victim, opts.Peer)
	if err := waitEndpoints(ctx, c, w.Namespace, func(ready map[string]bool) bool { return ready[victim] && ready[opts.Peer] }, time.Minute); err != nil {
		return res, err
	}

	if err := waitReturnSettled(ctx, c, tl); err != nil {
		return res, err
	}
	off := watchEndpointOff(ctx, c, w.Namespace, victim)
	tl.Step("%s dies: its Lease stops, its host goes silent and its agent freezes in the same instant", victim)
	res.DiedAt = time.Now()
	if opts.KillAgent != nil {
		if err := opts.KillAgent(); err != nil {
			return res, fmt.Errorf("the death of %s's host: %w", victim, err)
		}
	}
	if err := c.StopNode(ctx, victim); err != nil {
		return res, err
	}

	deadline := opts.Timeout
	if deadline <= 0 {
		deadline = c.Timings.NodeMonitorGracePeriod + time.Duration(c.Timings.DefaultTolerationSeconds)*time.Second + time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var err error
	if opts.KillAgent != nil {
		res.VerdictBy = "taint " + UnreachableTaint + " timeAdded"
		res.Verdict, err = s13Taint(wctx, c, victim, res.DiedAt)
	} else {
		res.VerdictBy = "node NotReady lastTransitionTime"
		res.Verdict, err = s13NotReady(wctx, c, victim, res.DiedAt)
	}
	if err != nil {
		return res, fmt.Errorf("S13 verdict (%s): %w", res.VerdictBy, err)
	}
	tl.Step("%s judged dead %.1fs after death (%s)", victim, res.Verdict.Seconds(), res.VerdictBy)
	select {
	case at, ok := <-off:
		if !ok {
			return res, fmt.Errorf("S13: the endpoint watch ended before %s's endpoint went off", victim)
		}
		res.EndpointsOff = at.Sub(res.DiedAt)
	case <-wctx.Done():
		return res, fmt.Errorf("S13: %s's endpoint still ready %s after death", victim, deadline)
	}
	tl.Step("Service %s stops sending to %s %.1fs after death (watch)", S13Service, victim, res.EndpointsOff.Seconds())

	err = wait.PollUntilContextCancel(wctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
		if err != nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" || p.Spec.NodeName == victim || p.DeletionTimestamp != nil {
				continue
			}
			if c := kubestatus.PodReadyCondition(&p); c != nil && c.Status == corev1.ConditionTrue {
				res.Replaced, res.Replacement = true, p.Name
				res.ReplacementReady = c.LastTransitionTime.Sub(res.DiedAt)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return res, fmt.Errorf("S13: no replacement of %s Ready within %s of death", w, deadline)
	}
	tl.Step("replacement %s Ready %.1fs after death (its Ready lastTransitionTime)", res.Replacement, res.ReplacementReady.Seconds())
	return res, nil
}

// S13ReplacementBound is how soon after a death, with upstream's default
// timings, the lane with rebound must have the critical pod's replacement
// Ready: the bound `rebound-bench detect` holds its worst death to, and
// the demo's S13 lane.
const S13ReplacementBound = 15 * time.Second

// waitReturnSettled waits until a node grace period has passed since the
// first Ready transition of the nodes Ready now (zone.FullDisruptionEnd,
// the rescue planner's own reading; a second more: the transition's time
// is whole seconds). In a sandbox that just started every node became
// Ready moments ago, which to rebound looks like the end of a full
// disruption: it holds rescues until a node grace after it (the nodes
// come back one by one after a stall, and none is judged before), while
// marking a node unreachable is not held. A death timed before would
// measure that hold, not the detection. In a cluster up for longer, as
// between a series' deaths, it returns at once.
func waitReturnSettled(ctx context.Context, c *sandbox.Cluster, tl *Timeline) error {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the nodes: %w", err)
	}
	first := zone.FullDisruptionEnd(nodes.Items, func(n corev1.Node) (bool, time.Time) { return kubestatus.NodeReadySince(&n) })
	if first.IsZero() {
		return nil
	}
	settled := first.Add(c.Timings.NodeMonitorGracePeriod + time.Second)
	if left := time.Until(settled); left > 0 {
		tl.Step("the first node Ready now became Ready at %s: the death waits %.1fs, a node grace (%s) after it, as rebound holds its rescues after what may be the end of a full disruption",
			first.Format("15:04:05"), left.Seconds(), c.Timings.NodeMonitorGracePeriod)
		return sleepUntil(ctx, settled)
	}
	return nil
}

// s13Service creates the Service in the workload's namespace and its
// second endpoint, a bare pod on peer.
func s13Service(ctx context.Context, c *sandbox.Cluster, ns, peer string) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: S13Service},
		Spec: corev1.ServiceSpec{
			Selector: s13EndpointLabel,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := c.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service %s: %w", S13Service, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s13-peer", Labels: s13EndpointLabel},
		Spec: corev1.PodSpec{
			NodeName:                      peer,
			Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the Service's pod on %s: %w", peer, err)
	}
	return nil
}

// endpointReadiness maps each node to whether the Service has a ready
// endpoint on it.
func endpointReadiness(slices []discoveryv1.EndpointSlice) map[string]bool {
	out := map[string]bool{}
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.NodeName == nil {
				continue
			}
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			out[*e.NodeName] = out[*e.NodeName] || ready
		}
	}
	return out
}

func waitEndpoints(ctx context.Context, c *sandbox.Cluster, ns string, cond func(map[string]bool) bool, timeout time.Duration) error {
	var last map[string]bool
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + S13Service})
		if err != nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		last = endpointReadiness(l.Items)
		return cond(last), nil
	})
	if err != nil {
		return fmt.Errorf("Service %s endpoints: ready by node %v: %w", S13Service, last, err)
	}
	return nil
}

// watchEndpointOff watches the Service's EndpointSlices and sends the
// moment (the runner's clock) node's endpoint is no longer ready.
func watchEndpointOff(ctx context.Context, c *sandbox.Cluster, ns, node string) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		defer close(out)
		sel := discoveryv1.LabelServiceName + "=" + S13Service
		for ctx.Err() == nil {
			l, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond): // a retry's pause
				}
				continue
			}
			byName := map[string]discoveryv1.EndpointSlice{}
			for _, s := range l.Items {
				byName[s.Name] = s
			}
			w, err := c.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				s, ok := ev.Object.(*discoveryv1.EndpointSlice)
				if !ok {
					continue
				}
				if ev.Type == watch.Deleted {
					delete(byName, s.Name)
				} else {
					byName[s.Name] = *s
				}
				all := make([]discoveryv1.EndpointSlice, 0, len(byName))
				for _, s := range byName {
					all = append(all, s)
				}
				if !endpointReadiness(all)[node] {
					out <- time.Now()
					w.Stop()
					return
				}
			}
		}
	}()
	return out
}

// s13Taint waits for rebound's taint on node and returns its timeAdded
// after died.
func s13Taint(ctx context.Context, c *sandbox.Cluster, node string, died time.Time) (time.Duration, error) {
	var at time.Duration
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		for _, t := range n.Spec.Taints {
			if t.Key == UnreachableTaint && t.TimeAdded != nil {
				at = t.TimeAdded.Sub(died)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, errors.New("no " + UnreachableTaint + " taint on " + node)
	}
	return at, nil
}

// s13NotReady waits for node's NotReady transition and returns it after
// died.
func s13NotReady(ctx context.Context, c *sandbox.Cluster, node string, died time.Time) (time.Duration, error) {
	var at time.Duration
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		if cond := kubestatus.NodeReadyCondition(n); cond != nil && cond.Status != corev1.ConditionTrue {
			at = cond.LastTransitionTime.Sub(died)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return 0, errors.New(node + " never NotReady")
	}
	return at, nil
}

// S13PairOptions tune S13 on both lanes.
type S13PairOptions struct {
	Workload Workload
	Peer     string
	// KillAgent is the dying node's host death in the lane with rebound.
	KillAgent func() error
	Timeout   time.Duration
}

// S13Pair is S13 without and with rebound.
type S13Pair struct {
	Without, With S13Result
}

// RunS13Pair plays S13 on both lanes at once.
func RunS13Pair(ctx context.Context, p Pair, opts S13PairOptions) (S13Pair, error) {
	var out S13Pair
	var err error
	out.Without, out.With, err = runPair(p, func(c *sandbox.Cluster, tl *Timeline, rebound bool) (S13Result, error) {
		o := S13Options{Workload: opts.Workload, Peer: opts.Peer, Timeout: opts.Timeout}
		if rebound {
			o.KillAgent = opts.KillAgent
			if o.KillAgent == nil {
				return S13Result{}, errors.New("S13 with rebound needs the dying node's agent to kill")
			}
		}
		return RunS13(ctx, c, tl, o)
	})
	return out, err
}

// Write writes S13's METRIC lines: each figure of both lanes, measured,
// and the speedups.
func (p S13Pair) Write(w *report.Writer) {
	for _, f := range []struct {
		name          string
		without, with time.Duration
	}{
		{"death_to_verdict", p.Without.Verdict, p.With.Verdict},
		{"death_to_endpoints_off", p.Without.EndpointsOff, p.With.EndpointsOff},
		{"death_to_replacement_ready", p.Without.ReplacementReady, p.With.ReplacementReady},
	} {
		w.Metric("s13_"+f.name+"_without_rebound", f.without.Seconds(), "s")
		w.Metric("s13_"+f.name, f.with.Seconds(), "s")
	}
	if p.With.ReplacementReady > 0 {
		w.Metric("s13_speedup", p.Without.ReplacementReady.Seconds()/p.With.ReplacementReady.Seconds(), "x")
	}
	if p.With.EndpointsOff > 0 {
		w.Metric("s13_endpoints_speedup", p.Without.EndpointsOff.Seconds()/p.With.EndpointsOff.Seconds(), "x")
	}
}

// Lines are the lines Write writes, as text.
func (p S13Pair) Lines() ([]string, error) { return report.Lines(p.Write) }

// WaitEarlyJudgement waits until the rebound controller logging to log
// has ended the hold of early judgement it starts with (one
// --gossip-distrust-window from its first pass: it knows no history of
// the planes' disagreements), so that a death timed after it is judged
// on both planes, not held for upstream. It polls the log for the line
// the controller writes when the hold ends.
func WaitEarlyJudgement(ctx context.Context, log string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(log)
		if err != nil {
			return false, nil //nolint:nilerr // not written yet
		}
		return bytes.Contains(b, []byte(EarlyJudgementResumed)), nil
	})
	if err != nil {
		return fmt.Errorf("the rebound controller (log %s) did not end its start-up hold of early judgement within %s: %w", log, timeout, err)
	}
	return nil
}

// EarlyJudgementResumed is what the controller logs when a cluster-wide
// hold of early judgement ends.
const EarlyJudgementResumed = "early judgement no longer held"
