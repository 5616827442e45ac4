package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/peering"
)

// S15: a control-plane stall and its edges. Every kubelet's path to the
// API stops for longer than the node grace plus the policy's
// maxUnavailableTime, then the kubelets come back one after another (the
// critical pods' nodes last). kube-controller-manager evicts nothing; nor
// may rebound, with the Lease plane on, at the stall's start (the Ready
// flags flip one after another, the Leases went stale long before), in its
// middle, or at its end (the first node back is a target while the others
// are on their way), whatever the policy: nothing deleted (the apiserver's
// audit log), nobody out of the published peer set, every pod keeps its
// UID.

// s15PolicyLanes are the policies S15 is played with: the default
// maxUnavailableTime, and S13's TwoPlanes policy with 0s, the shortest.
type s15Lane struct {
	name        string
	policy      func(t *testing.T) []byte
	policyTime  time.Duration
	stopStagger time.Duration
}

func s15Lanes() []s15Lane {
	return []s15Lane{
		{name: "DefaultPolicyAtOnce", policyTime: 30 * time.Second, policy: func(t *testing.T) []byte {
			return fmt.Appendf(nil, `apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: s15
spec:
  critical:
    namespaces: [kube-system]
    priorityClassNames: [system-cluster-critical]
  maxUnavailableTime: 30s
`)
		}},
		{name: "TwoPlanes0sAtOnce", policy: func(*testing.T) []byte { return []byte(scenario.S13Policy) }},
		{name: "TwoPlanes0sOneAfterAnother", stopStagger: 2 * time.Second, policy: func(*testing.T) []byte { return []byte(scenario.S13Policy) }},
	}
}

// startS15Rebound installs rebound as deployed (its ServiceAccount's
// token, the detection roles) with the lane's policy and starts
// `rebound controller --lease-plane --peering`.
func startS15Rebound(ctx context.Context, t *testing.T, c *sandbox.Cluster, policy []byte) {
	t.Helper()
	cl := newClient(t, c)
	applyDeployBases(ctx, t, cl)
	must(t, install.DetectionFor(ctx, cl, "rebound-e2e", controllerUser))
	_, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-e2e"}, policy)
	must(t, err)
	startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
		"--lease-plane", "--peering")
}

func s15Workloads(c *sandbox.Cluster) []scenario.Workload {
	var ws []scenario.Workload
	for _, n := range []string{"node-1", "node-3"} {
		w := scenario.CriticalStandIn(n)
		w.Name = "crit-" + n
		ws = append(ws, w)
	}
	return ws
}

var s15PeerSet = types.NamespacedName{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName}

func TestS15StallEdges(t *testing.T) {
	t.Parallel()
	for _, lane := range s15Lanes() {
		t.Run(lane.name, func(t *testing.T) {
			t.Parallel()
			c := startSandbox(t, 5, s7Timings())
			ctx := testContext(t, 8*time.Minute)
			startS15Rebound(ctx, t, c, lane.policy(t))
			waitPeerSetMembers(ctx, t, c, len(c.NodeNames))
			stall := c.Timings.NodeMonitorGracePeriod + lane.policyTime + 10*time.Second
			config(t, "s15_stall", stall.Seconds(), "s")
			tl := scenario.NewTimeline(testWriter(t))
			res, err := scenario.RunS15(ctx, c, tl, scenario.S15Options{
				Workloads: s15Workloads(c), StopStagger: lane.stopStagger, ReturnStagger: 2 * time.Second,
				Stall: stall, PeerSet: s15PeerSet,
			})
			if err != nil {
				t.Fatal(err)
			}
			deleted := len(podDeletesBy(t, c, controllerUser))
			metricCount(t, "s15_pods_deleted", deleted)
			metricCount(t, "s15_peers_removed", len(res.RemovedPeers))
			if deleted != 0 {
				t.Errorf("rebound deleted %d pod(s) over the stall, its start and its end, want 0", deleted)
			}
			if len(res.RemovedPeers) != 0 {
				t.Errorf("peers removed from the published set: %v, want none", res.RemovedPeers)
			}
			for w, before := range res.Before {
				if after := res.After[w]; len(before) != 1 || !slices.Equal(before, after) {
					t.Errorf("%s: pods %v before the stall, %v after: want the same one", w, before, after)
				}
			}
		})
	}
}

// TestS15RealDeathAfterStall: the same stall (S13's TwoPlanes policy,
// 0s), but node-3 does not come back: holding at the edges must not hold
// for ever. Its critical pod is Ready elsewhere within the node grace plus
// maxUnavailableTime plus 15 s after the stall's end; the other pods keep
// their UIDs.
func TestS15RealDeathAfterStall(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 5, s7Timings())
	ctx := testContext(t, 8*time.Minute)
	startS15Rebound(ctx, t, c, []byte(scenario.S13Policy))
	grace := c.Timings.NodeMonitorGracePeriod
	stall := grace + 10*time.Second
	config(t, "s15_stall", stall.Seconds(), "s")
	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS15(ctx, c, tl, scenario.S15Options{
		Workloads: s15Workloads(c), ReturnStagger: 2 * time.Second, Stall: stall, StaysDown: "node-3",
	})
	if err != nil {
		t.Fatal(err)
	}
	metric(t, "s15_dead_node_after_stall", res.DeadRescued.Seconds(), "s")
	if bound := grace + 15*time.Second; res.DeadRescued > bound {
		t.Errorf("node-3's pod Ready elsewhere %s after the stall's end, want within the node grace + maxUnavailableTime 0s + 15 s = %s", res.DeadRescued, bound)
	}
	if n := len(podDeletesBy(t, c, controllerUser)); n != 1 {
		t.Errorf("rebound deleted %d pod(s), want 1 (node-3's, after the stall)", n)
	}
	if before, after := res.Before["kube-system/crit-node-1"], res.After["kube-system/crit-node-1"]; len(before) != 1 || !slices.Equal(before, after) {
		t.Errorf("node-1's pod %v before, %v after: want the same one", before, after)
	}
}

// waitPeerSetMembers waits until the published set holds n members, so
// that a removal can be seen at all.
func waitPeerSetMembers(ctx context.Context, t *testing.T, c *sandbox.Cluster, n int) {
	t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := scenario.PublishedSet(ctx, c.Client, s15PeerSet)
		if err != nil {
			return false, nil //nolint:nilerr // not published yet
		}
		last = scenario.Members(s)
		return len(last) == n, nil
	})
	if err != nil {
		t.Fatalf("the published peer set never held the %d nodes (last: %v): %v", n, last, err)
	}
}
