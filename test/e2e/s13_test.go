package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
)

// s13Victim dies in every S13 test; s13Peer holds the Service's other
// endpoint.
const (
	s13Victim = "node-3"
	s13Peer   = "node-0"
)

// TestS13FastDetection (seed: the node grace). 5 nodes, each with an agent
// gossiping on its own loopback address; a critical Deployment with one
// pod on node-3, and a Service with endpoints on node-3 and node-0. node-3
// dies outright: kwok stops renewing its Lease, and in the same instant its
// host drops every packet (its kubelet port's stand-in) and its agent
// freezes (GossipAgent.HostDeath). Both lanes in the same run, with the sandbox's fast
// timings (Lease renewed every 2 s, node grace 12 s, tolerations 20 s).
//
// Without rebound: the node is NotReady after the grace, its endpoints
// leave then, and the pod moves after the toleration. With rebound
// (--lease-plane, a TwoPlanes policy with maxUnavailableTime 0s, pods
// marked not ready early): the verdict comes about one renew interval
// plus the margin after death, the taint and the endpoints follow it, and
// the replacement starts at once.
func TestS13FastDetection(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	p := startPair(t, 5, timings)
	ctx := testContext(t, 6*time.Minute)
	agents, ctrl := startS13Rebound(ctx, t, p.With, scenario.GossipAgentOptions{})
	// A controller holds early judgement for a distrust window after it
	// starts (the lab's, 15 s): the death comes after it.
	must(t, scenario.WaitEarlyJudgement(ctx, ctrl.log, time.Minute))

	res, err := scenario.RunS13Pair(ctx, p, scenario.S13PairOptions{
		Workload:  scenario.CriticalStandIn(s13Victim),
		Peer:      s13Peer,
		KillAgent: agents[s13Victim].HostDeath,
	})
	if err != nil {
		t.Fatal(err)
	}
	results(t, res.Write)
	grace := timings.NodeMonitorGracePeriod
	config(t, "s13_node_grace", grace.Seconds(), "s")
	config(t, "s13_lease_renew_interval", (timings.NodeLeaseDuration / 4).Seconds(), "s")

	// Upstream: nothing before the grace, which runs from the last renewal
	// (up to one renew interval before the death); the API's timestamps
	// are whole seconds.
	renew := timings.NodeLeaseDuration / 4
	if res.Without.Verdict < grace-renew-time.Second {
		t.Errorf("without rebound the node was NotReady %v after death, before the %v grace less a %v renew interval: the lane did not wait for upstream", res.Without.Verdict, grace, renew)
	}
	// rebound: the verdict well before the grace, and every effect before
	// upstream's. The bounds carry slack for a loaded machine; the figures
	// are in the METRIC lines.
	if res.With.Verdict >= grace {
		t.Errorf("with rebound the verdict came %v after death, not before the %v node grace", res.With.Verdict, grace)
	}
	if res.With.EndpointsOff >= res.Without.EndpointsOff {
		t.Errorf("endpoints off after %v with rebound, %v without: no faster", res.With.EndpointsOff, res.Without.EndpointsOff)
	}
	if res.With.ReplacementReady >= res.Without.ReplacementReady {
		t.Errorf("replacement Ready after %v with rebound, %v without: no faster", res.With.ReplacementReady, res.Without.ReplacementReady)
	}
	if res.With.ReplacementReady >= grace {
		t.Errorf("with rebound the replacement was Ready %v after death, not before the %v node grace", res.With.ReplacementReady, grace)
	}
}

// TestS13APIOnlyLoss: node-3's Lease stops but its agent lives (the node
// is cut off from the API, not dead). The gossip plane sees it alive: no
// early action over 3x the verdict time (no taint, its pod not deleted),
// and what happens at the grace is upstream's own.
func TestS13APIOnlyLoss(t *testing.T) {
	t.Parallel()
	s13Negative(t, scenario.GossipAgentOptions{}, func(ctx context.Context, c *sandbox.Cluster, agents map[string]*scenario.GossipAgent) error {
		return c.StopNode(ctx, s13Victim)
	})
}

// TestS13GossipOnlyLoss: node-3's agent dies (SIGKILL), its host and its
// Lease live on. The Lease plane says alive: no action.
func TestS13GossipOnlyLoss(t *testing.T) {
	t.Parallel()
	s13Negative(t, scenario.GossipAgentOptions{}, func(ctx context.Context, c *sandbox.Cluster, agents map[string]*scenario.GossipAgent) error {
		return agents[s13Victim].Kill()
	})
}

// TestS13NoQuorum: only node-0 and node-3 gossip; node-3 dies outright.
// node-0 alone says dead: a lone watcher never decides, whatever the
// Lease says.
func TestS13NoQuorum(t *testing.T) {
	t.Parallel()
	s13Negative(t, scenario.GossipAgentOptions{Only: []string{s13Peer, s13Victim}}, func(ctx context.Context, c *sandbox.Cluster, agents map[string]*scenario.GossipAgent) error {
		if err := agents[s13Victim].HostDeath(); err != nil {
			return err
		}
		return c.StopNode(ctx, s13Victim)
	})
}

// TestS13WrongKey: two of node-3's three watchers (on the ring of all five
// reporters, liveness.Watchers) gossip with another key; node-3 dies
// outright. They never see a member of the real membership, so they
// cannot vote on node-3, and its one watcher with the right key is short
// of the quorum of two: no early action.
func TestS13WrongKey(t *testing.T) {
	t.Parallel()
	var nodes []string
	for i := range 5 {
		nodes = append(nodes, sandbox.NodeName(i))
	}
	wrong := liveness.Watchers(s13Victim, nodes, liveness.DefaultWatchers)[:2]
	s13Negative(t, scenario.GossipAgentOptions{WrongKey: wrong}, func(ctx context.Context, c *sandbox.Cluster, agents map[string]*scenario.GossipAgent) error {
		if err := agents[s13Victim].HostDeath(); err != nil {
			return err
		}
		return c.StopNode(ctx, s13Victim)
	})
}

// s13Window is how long a negative lane watches for an early action: 3x
// the positive lane's verdict time (about one renew interval, 2 s, plus
// the margin, 2 s, plus the gossip's few seconds), and still inside the
// 12 s node grace so that what upstream does at the grace is not counted.
const s13Window = 11 * time.Second

// s13Negative starts one sandbox with rebound as TestS13FastDetection does,
// puts the critical pod on node-3, does what fail does, and requires no
// early action for s13Window: no rebound.dev/unreachable taint, and, while
// the API still has node-3 Ready, its pod neither deleted nor marked not
// ready.
func s13Negative(t *testing.T, a scenario.GossipAgentOptions, fail func(context.Context, *sandbox.Cluster, map[string]*scenario.GossipAgent) error) {
	c := startSandbox(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 4*time.Minute)
	agents, ctrl := startS13Rebound(ctx, t, c, a)
	w := scenario.CriticalStandIn(s13Victim)
	must(t, w.Create(ctx, c.Client))
	var pod corev1.Pod
	poll(ctx, t, time.Minute, w.String()+" Ready on "+s13Victim, func() (bool, string) {
		pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err)
		}
		pod = pods.Items[0]
		return pod.Spec.NodeName == s13Victim && kubestatus.PodReady(&pod), pod.Spec.NodeName
	})
	waitGossipReports(ctx, t, c, agents)
	// Past the controller's start-up hold, so that the lane shows the
	// rules, not the hold, keeping the node from early action.
	must(t, scenario.WaitEarlyJudgement(ctx, ctrl.log, time.Minute))

	must(t, fail(ctx, c, agents))
	start := time.Now()
	for time.Since(start) < s13Window {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, s13Victim, metav1.GetOptions{})
		must(t, err)
		for _, taint := range n.Spec.Taints {
			if taint.Key == scenario.UnreachableTaint {
				t.Fatalf("%s tainted %s %v after the failure: an early action", s13Victim, taint.Key, time.Since(start))
			}
		}
		// Once the API has the node NotReady, what follows is no longer
		// early: upstream marks its pods not ready itself, and a policy
		// may act on NotReady as it always could.
		if kubestatus.NodeReady(n) {
			got, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			must(t, err)
			if got.DeletionTimestamp != nil {
				t.Fatalf("pod %s deleted %v after the failure while %s is Ready: an early action", pod.Name, time.Since(start), s13Victim)
			}
			if !kubestatus.PodReady(got) {
				t.Fatalf("pod %s marked not ready %v after the failure while %s is Ready: an early action", pod.Name, time.Since(start), s13Victim)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond): // the next look
		}
	}
	metricCount(t, "s13_early_actions_"+strings.ToLower(strings.TrimPrefix(t.Name(), "TestS13")), 0)
}

// startS13Rebound installs rebound on c for two-plane detection (the
// controller's roles, the detection roles, the TwoPlanes policy), starts
// `rebound controller --lease-plane` and the gossip-only agents of a
// (scenario.StartGossipAgents), and returns the agents by node and the
// controller. ctrlArgs are added to the controller's flags.
func startS13Rebound(ctx context.Context, t *testing.T, c *sandbox.Cluster, a scenario.GossipAgentOptions, ctrlArgs ...string) (map[string]*scenario.GossipAgent, *controllerProcess) {
	t.Helper()
	cl := installRebound(ctx, t, c)
	_, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-e2e"}, []byte(scenario.S13Policy))
	must(t, err)
	must(t, install.DetectionFor(ctx, cl, "rebound-e2e", sandbox.ReboundUser))
	ctrl := startController(t, c, append([]string{"--lease-plane", "--mark-pods-not-ready-early"}, ctrlArgs...)...)
	a.Binary = reboundBinary
	agents, err := scenario.StartGossipAgents(ctx, c, a)
	must(t, err)
	t.Cleanup(func() {
		scenario.StopAll(agents)
		if t.Failed() {
			for _, ag := range agents {
				t.Logf("rebound agent %s log:\n%s", ag.Node, tail(ag.Log, 30))
			}
		}
	})
	return agents, ctrl
}

// waitGossipReports waits until every agent has written a gossip read
// that counts the members it can see: the membership has formed.
func waitGossipReports(ctx context.Context, t *testing.T, c *sandbox.Cluster, agents map[string]*scenario.GossipAgent) {
	t.Helper()
	cl := newClient(t, c)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for n := range agents {
			var r v1alpha1.PeeringReport
			if err := cl.Get(ctx, client.ObjectKey{Name: n}, &r); err != nil || r.Gossip == nil {
				return false, nil //nolint:nilerr // not written yet
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the agents' gossip reads did not all appear: %v", err)
	}
}
