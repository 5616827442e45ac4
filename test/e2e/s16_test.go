package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
	"rebound/pkg/peering/calico"
)

// S16: a control plane that one node still reaches. 6 nodes; node-0 is
// the control-plane node (tainted as kubeadm taints it), its kubelet and
// its agent keep reaching the API; the kubelets and the agents of nodes
// 1-5 lose it in the same second (kwok's heartbeats stop, each agent's
// own path to the apiserver is cut: scenario.RunS16), for longer than the
// node grace plus the policy's maxUnavailableTime, while every agent
// gossips on. A coredns-like critical Deployment on each worker,
// tolerating node-0's taint. kube-controller-manager evicts nothing
// (PartialDisruption); rebound, with the real binary, --lease-plane and
// --peering, and real gossiping agents, must delete none of the workers'
// pods, take no peer out of the published set, and mark no node (the
// apiserver's audit log), whatever the policy; every pod keeps its UID.

// s16PruneGrace is the controllers' --peering-prune-grace-period: short,
// so that the window runs well past it.
const s16PruneGrace = 5 * time.Second

// s16Lanes are S15's policies played at once: the default
// maxUnavailableTime and S13's TwoPlanes 0s policy.
func s16Lanes() []s15Lane {
	var out []s15Lane
	for _, l := range s15Lanes() {
		if l.stopStagger == 0 {
			l.name = strings.TrimSuffix(l.name, "AtOnce")
			out = append(out, l)
		}
	}
	return out
}

// startS16 starts a 6-node sandbox with rebound as deployed (its
// ServiceAccount, the detection roles, the lane's policy), `rebound
// controller --lease-plane --mark-pods-not-ready-early --peering`, and a
// gossiping agent on every node with its own path to the apiserver; it
// returns once the published set holds every node, every agent has
// written its gossip read, and the controller judges early.
func startS16(ctx context.Context, t *testing.T, policy []byte) (*sandbox.Cluster, map[string]*scenario.GossipAgent) {
	t.Helper()
	c := startSandbox(t, 6, s7Timings())
	cl := newClient(t, c)
	applyDeployBases(ctx, t, cl)
	must(t, install.DetectionFor(ctx, cl, "rebound-e2e", controllerUser))
	_, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-e2e"}, policy)
	must(t, err)
	ctrl := startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
		"--lease-plane", "--mark-pods-not-ready-early", "--peering", "--peering-prune-grace-period", s16PruneGrace.String())
	agents, err := scenario.StartGossipAgents(ctx, c, scenario.GossipAgentOptions{Binary: reboundBinary, OwnAPIPaths: true})
	must(t, err)
	t.Cleanup(func() {
		scenario.StopAll(agents)
		if t.Failed() {
			for _, ag := range agents {
				t.Logf("rebound agent %s log:\n%s", ag.Node, tail(ag.Log, 30))
			}
		}
	})
	waitPeerSetMembers(ctx, t, c, len(c.NodeNames))
	waitGossipReports(ctx, t, c, agents)
	must(t, scenario.WaitEarlyJudgement(ctx, ctrl.log, time.Minute))
	config(t, "s16_prune_grace", s16PruneGrace.Seconds(), "s")
	return c, agents
}

// s16Window is how long the workers stay cut off: past the node grace,
// the policy's maxUnavailableTime and 3x the prune grace, with room.
func s16Window(c *sandbox.Cluster, policyTime time.Duration) time.Duration {
	return c.Timings.NodeMonitorGracePeriod + max(policyTime, 3*s16PruneGrace) + 15*time.Second
}

// s16Check prints S16's counts and fails the test for each action on a
// live worker.
func s16Check(t *testing.T, res scenario.S16Result) {
	t.Helper()
	metricCount(t, "s16_pods_deleted", len(res.Deleted))
	metricCount(t, "s16_peers_removed", len(res.RemovedPeers))
	metricCount(t, "s16_nodes_marked", len(res.Marked))
	if len(res.DeletedInWindow) != len(res.Deleted) {
		t.Logf("deleted while cut off: %v; through the heal: %v", res.DeletedInWindow, res.Deleted)
	}
	if len(res.Deleted) != 0 {
		t.Errorf("rebound deleted %d critical pod(s) of live workers, cut off from the API but alive: %v; want 0", len(res.Deleted), res.Deleted)
	}
	if len(res.RemovedPeers) != 0 {
		t.Errorf("peers removed from the published set: %v; want none (every worker lives, gossip says so)", res.RemovedPeers)
	}
	if len(res.Marked) != 0 {
		t.Errorf("rebound tainted %s on live nodes %v; want none", scenario.UnreachableTaint, res.Marked)
	}
}

// runS16Lane starts lane's sandbox, controller and agents, plays S16 with
// opts (the window, the agents and the audit identity filled in) and
// checks what every S16 lane holds to (s16Check).
func runS16Lane(t *testing.T, lane s15Lane, opts scenario.S16Options) (*sandbox.Cluster, scenario.S16Result) {
	t.Helper()
	ctx := testContext(t, 8*time.Minute)
	c, agents := startS16(ctx, t, lane.policy(t))
	window := s16Window(c, lane.policyTime)
	config(t, "s16_window", window.Seconds(), "s")
	opts.Agents, opts.Window, opts.PeerSet, opts.User = agents, window, s15PeerSet, controllerUser
	res, err := scenario.RunS16(ctx, c, scenario.NewTimeline(testWriter(t)), opts)
	if err != nil {
		t.Fatal(err)
	}
	s16Check(t, res)
	return c, res
}

func TestS16OneNodeReachesTheAPI(t *testing.T) {
	t.Parallel()
	for _, lane := range s16Lanes() {
		t.Run(lane.name, func(t *testing.T) {
			t.Parallel()
			_, res := runS16Lane(t, lane, scenario.S16Options{})
			for w, before := range res.Before {
				if after := res.After[w]; len(before) != 1 || !slices.Equal(before, after) {
					t.Errorf("%s: pods %v before the cut, %v after the heal: want the same one", w, before, after)
				}
			}
		})
	}
}

// TestS16WorkerDiesMeanwhile: S16, and node-4's host really dies 3 s
// after the cut (its host stand-in goes silent, its agent stops; its
// kubelet is already cut off and never returns). Its critical pod must be
// Ready elsewhere after the policy (from the death, both as the API dates
// them), within the node grace plus maxUnavailableTime plus 20 s; the live
// workers' pods keep their UIDs, and nothing is done to them.
func TestS16WorkerDiesMeanwhile(t *testing.T) {
	t.Parallel()
	const dies = "node-4"
	for _, lane := range s16Lanes() {
		t.Run(lane.name, func(t *testing.T) {
			t.Parallel()
			c, res := runS16Lane(t, lane, scenario.S16Options{Dies: dies, DieAfter: 3 * time.Second})
			metric(t, "s16_dead_worker_rescued", res.DeadRescued.Seconds(), "s")
			if bound := c.Timings.NodeMonitorGracePeriod + lane.policyTime + 20*time.Second; res.DeadRescued > bound {
				t.Errorf("%s's critical pod Ready elsewhere %s after its death, want within the node grace + maxUnavailableTime + 20 s = %s", dies, res.DeadRescued, bound)
			}
			if len(res.DeadDeleted) > 1 {
				t.Errorf("rebound deleted %d pods of %s's workload (%v): one rescue, want one delete", len(res.DeadDeleted), dies, res.DeadDeleted)
			}
			for _, w := range res.Workloads {
				before, after := res.Before[w.String()], res.After[w.String()]
				if w.PreferNode == dies {
					if len(after) != 1 || slices.Equal(before, after) {
						t.Errorf("%s (on the dead %s): pods %v before, %v after: want one replacement", w, dies, before, after)
					}
					continue
				}
				if len(before) != 1 || !slices.Equal(before, after) {
					t.Errorf("%s: pods %v before the cut, %v after the heal: want the same one", w, before, after)
				}
			}
		})
	}
}

// TestS16NotReadyRenewingStaysInMesh: a node NotReady by its own
// kubelet's report (reason ContainerRuntimeDown) while its Lease renews
// (the lab's sandbox.Cluster.ReportNotReady; kwok renews on) stays in the
// published set past the prune grace, three times over, with each
// backend: the BIRD agents' (every session up, reported) and Calico's
// BGPPeer (no session reports, the agent-less install, Calico's own mesh
// off as docs/peering-calico.md migrates it), and gossiping agents alone
// with the node's member down while its host answers. `rebound controller
// --lease-plane --peering` runs as deployed.
func TestS16NotReadyRenewingStaysInMesh(t *testing.T) {
	t.Parallel()
	const (
		pruneGrace = 3 * time.Second
		node       = "node-2"
	)
	hold := 3*pruneGrace + 10*time.Second
	start := func(ctx context.Context, t *testing.T, extra ...string) *sandbox.Cluster {
		c := startSandbox(t, 4, s7Timings())
		cl := newClient(t, c)
		applyDeployBases(ctx, t, cl)
		must(t, install.DetectionFor(ctx, cl, "rebound-e2e", controllerUser))
		args := append([]string{"--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
			"--lease-plane", "--peering", "--peering-prune-grace-period", pruneGrace.String()}, extra...)
		startController(t, c, args...)
		waitPeerSetMembers(ctx, t, c, len(c.NodeNames))
		return c
	}
	play := func(ctx context.Context, t *testing.T, c *sandbox.Cluster) {
		config(t, "s16_notready_prune_grace", pruneGrace.Seconds(), "s")
		config(t, "s16_notready_hold", hold.Seconds(), "s")
		res, err := scenario.RunNotReadyRenewing(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.NotReadyRenewingOptions{
			Node: node, Hold: hold, PeerSet: s15PeerSet,
		})
		if err != nil {
			t.Fatal(err)
		}
		pruned := 0
		if res.Removed != "" {
			pruned = 1
		}
		metricCount(t, "s16_notready_renewing_pruned", pruned)
		metric(t, "s16_notready_renewing_notready", res.NotReadyFor.Seconds(), "s")
		if pruned != 0 {
			t.Errorf("%s, NotReady by its kubelet's report while its Lease renewed (%d renewals seen), %s; want it kept in the mesh", node, res.Renewals, res.Removed)
		}
	}

	t.Run("BIRDAgents", func(t *testing.T) {
		bins := birdtest.Require(t, bird.Bird16)
		t.Parallel()
		ctx := testContext(t, 5*time.Minute)
		c := start(ctx, t, "--peering-report-max-age", "10s")
		lab := birdLabOnSandbox(ctx, t, c, birdlab.Options{Bins: bins, Net: 41, Dir: shortDir(t), Include: true}, "")
		must(t, lab.StartAll(ctx))
		_, stop, err := scenario.StartMeshAgents(ctx, c, lab, s15PeerSet, testLogWriter(t))
		t.Cleanup(stop)
		must(t, err)
		for _, n := range c.NodeNames {
			waitInSet(ctx, t, c, n, true, 30*time.Second)
		}
		play(ctx, t, c)
	})
	// No BGP backend's reports at all, gossiping agents, and the node's
	// member down while its host answers (MemberDown: no vote either way).
	t.Run("GossipMemberDown", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 5*time.Minute)
		c := start(ctx, t)
		agents, err := scenario.StartGossipAgents(ctx, c, scenario.GossipAgentOptions{Binary: reboundBinary})
		must(t, err)
		t.Cleanup(func() { scenario.StopAll(agents) })
		waitGossipReports(ctx, t, c, agents)
		must(t, agents[node].Kill())
		play(ctx, t, c)
	})
	t.Run("Calico", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, 5*time.Minute)
		c := startSandbox(t, 4, s7Timings())
		installCalicoCRDs(ctx, t, c)
		dyn, err := dynamic.NewForConfig(c.Config)
		must(t, err)
		// The migrated state: Calico's own mesh off, the set is the mesh.
		_, err = dyn.Resource(bgpConfigs).Create(ctx, calico.BGPConfiguration(false), metav1.CreateOptions{})
		must(t, err)
		cl := newClient(t, c)
		applyDeployBases(ctx, t, cl)
		applyFiles(ctx, t, cl, false, repoPath("deploy/calico/rbac.yaml"))
		must(t, install.DetectionFor(ctx, cl, "rebound-e2e", controllerUser))
		startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
			"--lease-plane", "--peering", "--calico", "--peering-prune-grace-period", pruneGrace.String())
		waitPeerSetMembers(ctx, t, c, len(c.NodeNames))
		for _, n := range c.NodeNames {
			waitInSet(ctx, t, c, n, true, 30*time.Second)
		}
		play(ctx, t, c)
	})
}
