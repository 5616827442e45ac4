package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

// TestS7ControlPlanePartitionPeering, the peering half of S7: 5 nodes,
// BIRD and an agent on each; every node stops heartbeating at once (the
// API sees a full disruption while every BIRD still runs). For 3x the
// prune grace (and the report max age): 0 changes of the published set or
// of any in-set label, every agent's mesh file unchanged, every session
// still Established; the set says frozen and diagnose explains it. After
// the nodes return the set is whole.
func TestS7ControlPlanePartitionPeering(t *testing.T) {
	setCtrlLogger.Do(func() { ctrl.SetLogger(logr.Discard()) })
	bins := birdtest.Require(t, bird.Bird16)
	c := startSandbox(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 8*time.Minute)
	opts := scenario.S7PeeringOptions{Bins: bins, Net: 37, PruneGrace: 4 * time.Second, ReportMaxAge: 6 * time.Second, Logs: testLogWriter(t)}
	res, err := scenario.S7ControlPlanePartitionPeering(ctx, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	config(t, "s7_prune_grace", opts.PruneGrace.Seconds(), "s")
	config(t, "s7_report_max_age", opts.ReportMaxAge.Seconds(), "s")
	metric(t, "s7_all_notready", res.AllNotReady.Seconds(), "s")
	metricCount(t, "s7_peer_set_changes", res.SetChanges)
	metricCount(t, "s7_agent_mesh_changes", res.MeshChanges)
	metricCount(t, "s7_peer_set_document_writes", res.DocumentWrites)
	if res.AllNotReady < 3*opts.PruneGrace {
		t.Errorf("every node NotReady for %v only, want at least 3x the prune grace %v", res.AllNotReady, opts.PruneGrace)
	}
	if res.SetChanges != 0 || res.MeshChanges != 0 || len(res.RemovedPeers) > 0 {
		t.Errorf("during the partition: %d set changes, %d mesh files changed, sessions lost %v; want none", res.SetChanges, res.MeshChanges, res.RemovedPeers)
	}
	if !res.Frozen || !strings.Contains(res.FrozenReason, "full disruption") {
		t.Errorf("published set frozen=%v (%q), want frozen for full disruption", res.Frozen, res.FrozenReason)
	}
	if !strings.Contains(res.Diagnose, "frozen") {
		t.Errorf("diagnose does not explain the hold: %q", res.Diagnose)
	}
	if res.MembersBefore != 5 || res.MembersAfter != 5 || res.AgentRefusals != 0 {
		t.Errorf("members %d before, %d after, %d agent refusals; want 5, 5, 0", res.MembersBefore, res.MembersAfter, res.AgentRefusals)
	}
}
