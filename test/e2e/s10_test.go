package e2e

import (
	"slices"
	"testing"
	"time"

	"rebound/internal/lab/install"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// TestS10AsymmetricPartition: 5 nodes, a BIRD and an agent on each, and
// `rebound controller --peering` (recovery and peering, deploy/'s RBAC).
// One critical Deployment on each of nodes 1-4, each pod asking for 60%
// of node-0's CPU, so node-0 has room for one replacement. The API stops
// hearing nodes 1-4 one at a time, a second apart, while their BIRDs and
// agents keep every session up. For 3x the prune grace, and past
// maxUnavailableTime: no peer leaves the published set or any BIRD, at
// most one pod is deleted (the audit log), no replacement is left
// Pending; after the heal every pod not replaced has its old UID.
func TestS10AsymmetricPartition(t *testing.T) {
	bins := birdtest.Require(t, bird.Bird16)
	t.Parallel()
	const (
		policyTime = 5 * time.Second
		pruneGrace = 3 * time.Second
	)
	hold := max(3*pruneGrace, policyTime+10*time.Second)
	c := startSandbox(t, 5, s7Timings())
	ctx := testContext(t, 6*time.Minute)
	cl := newClient(t, c)
	applyDeployBases(ctx, t, cl)
	applyFiles(ctx, t, cl, false, writePolicy(t, "s10", policyTime))
	startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
		"--peering", "--peering-prune-grace-period", pruneGrace.String(), "--peering-report-max-age", "10s")
	config(t, "s10_prune_grace", pruneGrace.Seconds(), "s")
	config(t, "s10_hold", hold.Seconds(), "s")

	res, err := scenario.S10AsymmetricPartition(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S10Options{
		Bins: bins, Net: 61, Hold: hold, User: controllerUser, Logs: testLogWriter(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("each critical pod requests cpu %s; node-0 had %s free", res.CPURequest, res.Room)
	metric(t, "s10_all_notready", res.AllNotReady.Seconds(), "s")
	metricCount(t, "s10_peers_removed", len(res.Removed)+len(res.LostSessions))
	metricCount(t, "s10_pods_deleted", len(res.Deleted))
	metricCount(t, "s10_pending_replacements", len(res.Pending))
	metricCount(t, "s10_pods_deleted_through_heal", res.DeletedThroughHeal)

	if res.AllNotReady < 3*pruneGrace || res.AllNotReady < policyTime {
		t.Errorf("nodes 1-4 NotReady together for %v only, want at least 3x the prune grace %v and the policy's %v", res.AllNotReady, pruneGrace, policyTime)
	}
	if len(res.Removed) != 0 || len(res.LostSessions) != 0 || res.MeshChanges != 0 {
		t.Errorf("during the partition: removed from the set %v, BIRD sessions lost %v, %d mesh files changed; want none (every session was up)", res.Removed, res.LostSessions, res.MeshChanges)
	}
	for _, n := range c.NodeNames[1:] {
		if got := res.Reasons[n]; got != peering.InSessionUp {
			t.Errorf("%s is published with reason %q, want %s (node-0's agent has its session Established)", n, got, peering.InSessionUp)
		}
	}
	if len(res.Deleted) > 1 || res.DeletedThroughHeal > 1 {
		t.Errorf("rebound deleted %v during the partition (%d through the heal); node-0 has room for one replacement, want at most 1", res.Deleted, res.DeletedThroughHeal)
	}
	if len(res.Pending) != 0 {
		t.Errorf("replacements Pending at the end of the partition: %v, want none (node-0: %v)", res.Pending, res.OnSurvivor)
	}
	if len(res.OnSurvivor) != len(res.Replaced) {
		t.Errorf("critical pods on node-0: %v; replaced workloads: %v", res.OnSurvivor, res.Replaced)
	}
	for w, before := range res.Before {
		after := res.After[w]
		replaced := slices.Contains(res.Replaced, w)
		switch {
		case len(before) != 1 || len(after) != 1:
			t.Errorf("%s: pods %v before, %v after; want one each", w, before, after)
		case !replaced && before[0] != after[0]:
			t.Errorf("%s was not rescued but its pod changed: %s before, %s after", w, before[0], after[0])
		case replaced && before[0] == after[0]:
			t.Errorf("%s's pod was deleted, yet the same pod %s runs after the heal", w, after[0])
		}
	}
}

// TestS10WithAgents: S10 as TestS10AsymmetricPartition plays it, with a
// gossiping agent on every node as well (`rebound controller
// --lease-plane --peering`), and the partitioned nodes' agents, the BIRD
// agents and the gossip agents, lose the API with their kubelets, each
// through its own path that the lab cuts: a real partition. Their BIRDs
// and their gossip go on, and node-0, the one node that reaches the API,
// sees each of them alive first-hand (its BGP sessions, its gossip
// probes). Evidence of life holds: no pod deleted, no peer removed
// through the heal, every pod keeps its UID. Two lanes: BIRD and gossip,
// and gossip alone (no BGP reports: node-0's gossip is the only witness,
// and it must reach every cut-off node, not only those it watches on the
// ring). Without agents, node-0 may take in the one replacement it has
// room for (TestS10AsymmetricPartition): one Lease renewing and the rest
// stale is also what a mass death looks like.
func TestS10WithAgents(t *testing.T) {
	t.Parallel()
	for _, lane := range []struct {
		name       string
		gossipOnly bool
	}{{"BIRDAndGossip", false}, {"GossipOnly", true}} {
		t.Run(lane.name, func(t *testing.T) {
			var bins birdtest.Binaries
			if !lane.gossipOnly {
				bins = birdtest.Require(t, bird.Bird16)
			}
			t.Parallel()
			s10WithAgents(t, bins, lane.gossipOnly)
		})
	}
}

func s10WithAgents(t *testing.T, bins birdtest.Binaries, gossipOnly bool) {
	const (
		policyTime = 5 * time.Second
		pruneGrace = 3 * time.Second
	)
	hold := max(3*pruneGrace, policyTime+10*time.Second)
	c := startSandbox(t, 5, s7Timings())
	ctx := testContext(t, 7*time.Minute)
	cl := newClient(t, c)
	applyDeployBases(ctx, t, cl)
	must(t, install.DetectionFor(ctx, cl, "rebound-e2e", controllerUser))
	applyFiles(ctx, t, cl, false, writePolicy(t, "s10", policyTime))
	ctrl := startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
		"--lease-plane", "--peering", "--peering-prune-grace-period", pruneGrace.String(), "--peering-report-max-age", "10s")
	// The agents refresh an unchanged read at a third of the controller's
	// 10 s report age, the product's ratio (60 s against 3 min).
	agents, err := scenario.StartGossipAgents(ctx, c, scenario.GossipAgentOptions{Binary: reboundBinary, OwnAPIPaths: true, ReportInterval: 3 * time.Second})
	must(t, err)
	t.Cleanup(func() {
		scenario.StopAll(agents)
		if t.Failed() {
			for _, ag := range agents {
				t.Logf("rebound agent %s log:\n%s", ag.Node, tail(ag.Log, 30))
			}
		}
	})
	waitGossipReports(ctx, t, c, agents)
	must(t, scenario.WaitEarlyJudgement(ctx, ctrl.log, time.Minute))
	config(t, "s10_prune_grace", pruneGrace.Seconds(), "s")
	config(t, "s10_hold", hold.Seconds(), "s")

	res, err := scenario.S10AsymmetricPartition(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S10Options{
		Bins: bins, Net: 63, Hold: hold, User: controllerUser, Logs: testLogWriter(t),
		AgentsLoseAPI: true, GossipAgents: agents, GossipOnly: gossipOnly,
	})
	if err != nil {
		t.Fatal(err)
	}
	metric(t, "s10_with_agents_all_notready", res.AllNotReady.Seconds(), "s")
	metricCount(t, "s10_with_agents_pods_deleted", max(len(res.Deleted), res.DeletedThroughHeal))
	metricCount(t, "s10_with_agents_peers_removed", len(res.Removed)+len(res.LostSessions))

	if res.AllNotReady < 3*pruneGrace || res.AllNotReady < policyTime {
		t.Errorf("nodes 1-4 NotReady together for %v only, want at least 3x the prune grace %v and the policy's %v", res.AllNotReady, pruneGrace, policyTime)
	}
	if len(res.Removed) != 0 || len(res.LostSessions) != 0 || res.MeshChanges != 0 {
		t.Errorf("during the partition: removed from the set %v, BIRD sessions lost %v, %d mesh files changed; want none (every node lived)", res.Removed, res.LostSessions, res.MeshChanges)
	}
	if len(res.Deleted) != 0 || res.DeletedThroughHeal != 0 {
		t.Errorf("rebound deleted %v during the partition (%d through the heal); every node lived and node-0 saw it, want none", res.Deleted, res.DeletedThroughHeal)
	}
	for w, before := range res.Before {
		if after := res.After[w]; len(before) != 1 || !slices.Equal(before, after) {
			t.Errorf("%s: pods %v before the partition, %v after the heal: want the same one", w, before, after)
		}
	}
}
