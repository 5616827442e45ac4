package scenario

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/zone"
)

// NodeState is what the observer tracks of a node.
type NodeState struct {
	Ready bool `json:"ready"`
	// NoExecute is true when the node carries a NoExecute taint of the node
	// lifecycle controller (not-ready or unreachable): the signal that
	// taint-based eviction has started for it.
	NoExecute bool `json:"noExecute"`
}

// PodState is what the observer tracks of a pod of the watched workload.
type PodState struct {
	Name        string `json:"name"`
	Node        string `json:"node"`
	Ready       bool   `json:"ready"`
	Terminating bool   `json:"terminating"`
}

// Snapshot is the cluster as the observer last saw it.
type Snapshot struct {
	Nodes     map[string]NodeState `json:"nodes"`
	Zones     map[string]string    `json:"zones"`
	Pods      []PodState           `json:"pods"`
	Available int32                `json:"available"`
	Desired   int32                `json:"desired"`
}

// AvailableOn reports whether the workload is fully available with a Ready,
// non-terminating pod on node.
func (s Snapshot) AvailableOn(node string) bool {
	if s.Desired == 0 || s.Available < s.Desired {
		return false
	}
	for _, p := range s.Pods {
		if p.Node == node && p.Ready && !p.Terminating {
			return true
		}
	}
	return false
}

// Summary says in one line what the snapshot holds, for an error that
// ends a wait: the workload's availability and pods, and every node that
// is not Ready or carries a NoExecute taint.
func (s Snapshot) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d available", s.Available, s.Desired)
	for _, p := range s.Pods {
		state := "not Ready"
		switch {
		case p.Terminating:
			state = "terminating"
		case p.Ready:
			state = "Ready"
		}
		node := p.Node
		if node == "" {
			node = "no node"
		}
		fmt.Fprintf(&b, "; pod %s on %s, %s", p.Name, node, state)
	}
	names := make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	healthy := 0
	for _, n := range names {
		ns := s.Nodes[n]
		switch {
		case !ns.Ready && ns.NoExecute:
			fmt.Fprintf(&b, "; node %s NotReady, NoExecute", n)
		case !ns.Ready:
			fmt.Fprintf(&b, "; node %s NotReady", n)
		case ns.NoExecute:
			fmt.Fprintf(&b, "; node %s Ready, NoExecute", n)
		default:
			healthy++
		}
	}
	fmt.Fprintf(&b, "; %d other node(s) Ready", healthy)
	for _, z := range sortedKeys(s.Zones) {
		fmt.Fprintf(&b, "; zone %s %s", z, s.Zones[z])
	}
	return b.String()
}

// PodNodes lists the nodes of the workload's live (non-terminating) pods.
func (s Snapshot) PodNodes() []string {
	var out []string
	for _, p := range s.Pods {
		if !p.Terminating {
			out = append(out, p.Node)
		}
	}
	sort.Strings(out)
	return out
}

// Observer polls the sandbox and adds an event to the timeline for every
// change it sees in nodes, zone states and the watched Deployment.
type Observer struct {
	c  *sandbox.Cluster
	tl *Timeline
	w  Workload

	mu   sync.Mutex
	last Snapshot
	seen bool
	// readErr is the last failed read and failures how many failed since
	// the last that succeeded: a stale snapshot names its cause.
	readErr  error
	failures int
}

// Observe starts an observer that runs until ctx ends.
func Observe(ctx context.Context, c *sandbox.Cluster, tl *Timeline, w Workload) *Observer {
	o := &Observer{c: c, tl: tl, w: w}
	o.poll(ctx)
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				o.poll(ctx)
			}
		}
	}()
	return o
}

// Snapshot returns the latest observation.
func (o *Observer) Snapshot() Snapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// WaitFor waits until cond holds for an observation, and returns the
// timeline time at which it was first seen.
func (o *Observer) WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(Snapshot) bool) (time.Duration, error) {
	var at time.Duration
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if cond(o.Snapshot()) {
			at = o.tl.Since()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s: not within %s: %w; last seen: %s%s", what, timeout, err, o.Snapshot().Summary(), o.readFailures())
	}
	return at, nil
}

// readFailures says, for an error, whether the snapshot is stale
// because the observer's reads have been failing.
func (o *Observer) readFailures() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.readErr == nil {
		return ""
	}
	return fmt.Sprintf(" (the observer's last %d read(s) failed: %v)", o.failures, o.readErr)
}

func (o *Observer) poll(ctx context.Context) {
	s, err := o.read(ctx)
	if err != nil {
		// The next tick tries again; apiserver hiccups are not events.
		o.mu.Lock()
		o.readErr, o.failures = err, o.failures+1
		o.mu.Unlock()
		return
	}
	o.mu.Lock()
	prev, seen := o.last, o.seen
	o.last, o.seen = s, true
	o.readErr, o.failures = nil, 0
	o.mu.Unlock()
	o.diff(prev, s, seen)
}

func (o *Observer) read(ctx context.Context) (Snapshot, error) {
	s := Snapshot{Nodes: map[string]NodeState{}, Zones: map[string]string{}}
	nodes, err := o.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ns := NodeState{Ready: kubestatus.NodeReady(n)}
		for _, t := range n.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) {
				ns.NoExecute = true
			}
		}
		s.Nodes[n.Name] = ns
	}
	transitions, err := o.c.ZoneTransitions()
	if err != nil {
		return s, err
	}
	for _, t := range transitions {
		s.Zones[zone.DisplayZone(t.Zone)] = t.State
	}
	if o.w.Name == "" {
		return s, nil
	}
	d, err := o.c.Client.AppsV1().Deployments(o.w.Namespace).Get(ctx, o.w.Name, metav1.GetOptions{})
	if err != nil {
		return s, err
	}
	s.Available = d.Status.AvailableReplicas
	if d.Spec.Replicas != nil {
		s.Desired = *d.Spec.Replicas
	}
	pods, err := o.c.Client.CoreV1().Pods(o.w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	if err != nil {
		return s, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		s.Pods = append(s.Pods, PodState{Name: p.Name, Node: p.Spec.NodeName, Ready: kubestatus.PodReady(p), Terminating: p.DeletionTimestamp != nil})
	}
	sort.Slice(s.Pods, func(i, j int) bool { return s.Pods[i].Name < s.Pods[j].Name })
	return s, nil
}

func (o *Observer) diff(prev, cur Snapshot, seen bool) {
	for _, name := range sortedKeys(cur.Nodes) {
		n, p := cur.Nodes[name], prev.Nodes[name]
		if seen && n == p {
			continue
		}
		if !seen || n.Ready != p.Ready {
			o.tl.Add("node", name, "%s", readyWord(n.Ready))
		}
		if n.NoExecute && (!seen || !p.NoExecute) {
			o.tl.Add("node", name, "tainted NoExecute: eviction of its pods has started")
		}
	}
	for _, z := range sortedKeys(cur.Zones) {
		if st := cur.Zones[z]; st != prev.Zones[z] {
			o.tl.Add("zone", z, "%s (kube-controller-manager)%s", st, zoneMeaning(st))
		}
	}
	prevPods := map[string]PodState{}
	for _, p := range prev.Pods {
		prevPods[p.Name] = p
	}
	curPods := map[string]bool{}
	for _, p := range cur.Pods {
		curPods[p.Name] = true
		old, ok := prevPods[p.Name]
		if ok && old == p {
			continue
		}
		o.tl.Add("pod", p.Name, "%s", podWords(p))
	}
	for _, p := range prev.Pods {
		if !curPods[p.Name] {
			o.tl.Add("pod", p.Name, "deleted")
		}
	}
	if o.w.Name != "" && (!seen || cur.Available != prev.Available || cur.Desired != prev.Desired) {
		o.tl.Add("workload", o.w.String(), "%d/%d available", cur.Available, cur.Desired)
	}
}

func zoneMeaning(state string) string {
	switch state {
	case "PartialDisruption":
		return ": eviction rate 0 in zones of <= 50 nodes, pods on dead nodes stay"
	case "FullDisruption":
		return ": every node of the zone is NotReady"
	}
	return ""
}

func podWords(p PodState) string {
	var parts []string
	if p.Node == "" {
		parts = append(parts, "Pending (not scheduled)")
	} else {
		parts = append(parts, "on "+p.Node)
	}
	if p.Ready {
		parts = append(parts, "Ready")
	} else {
		parts = append(parts, "not Ready")
	}
	if p.Terminating {
		parts = append(parts, "Terminating")
	}
	return strings.Join(parts, ", ")
}

func readyWord(ready bool) string {
	if ready {
		return "Ready"
	}
	return "NotReady"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
