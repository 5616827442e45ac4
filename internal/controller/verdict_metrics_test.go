package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"rebound/pkg/liveness"
)

// TestVerdictMetrics: the verdict counts follow each pass, and a death's
// detection time is observed once however many passes see it, and again
// only after the node came back and died anew.
func TestVerdictMetrics(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	dead := liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, LeaseRenewSeen: now.Add(-5 * time.Second), DetectedAt: now.Add(-time.Second)}
	var m verdictMetrics
	count := func() uint64 {
		var out dto.Metric
		if err := detectionSeconds.Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetHistogram().GetSampleCount()
	}
	start := count()
	for range 3 {
		m.observe(liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{"a": dead, "b": {Verdict: liveness.Alive}}}, now)
	}
	if got := count() - start; got != 1 {
		t.Fatalf("three passes over one death observed %d detections, want 1", got)
	}
	if got := testutil.ToFloat64(nodeVerdicts.WithLabelValues("Dead", "true")); got != 1 {
		t.Errorf("rebound_node_verdict{Dead,early} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(nodeVerdicts.WithLabelValues("Alive", "false")); got != 1 {
		t.Errorf("rebound_node_verdict{Alive} = %v, want 1", got)
	}
	m.observe(liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.Alive}}}, now)
	if got := testutil.ToFloat64(nodeVerdicts.WithLabelValues("Dead", "true")); got != 0 {
		t.Errorf("after the node came back rebound_node_verdict{Dead,early} = %v, want 0", got)
	}
	m.observe(liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{"a": dead}}, now)
	if got := count() - start; got != 2 {
		t.Fatalf("a second death observed %d detections in all, want 2", got)
	}
}

// TestWatcherMismatchLog: an agent on another --gossip-watchers than the
// controller's is logged once with both numbers, again only when its
// number changes or after it agreed in between, and counted every pass.
func TestWatcherMismatchLog(t *testing.T) {
	var lines []string
	ctx := logf.IntoContext(context.Background(), funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}))
	var w watcherMismatches
	b2 := liveness.WatcherMismatch{Reporter: "b", Agent: 2, Controller: 3}
	for _, step := range []struct {
		ms       []liveness.WatcherMismatch
		newLines int
	}{
		{ms: []liveness.WatcherMismatch{b2}, newLines: 1},
		{ms: []liveness.WatcherMismatch{b2}, newLines: 0},
		{ms: []liveness.WatcherMismatch{{Reporter: "b", Agent: 5, Controller: 3}}, newLines: 1},
		{ms: nil, newLines: 0},
		{ms: []liveness.WatcherMismatch{b2}, newLines: 1},
	} {
		before := len(lines)
		w.observe(ctx, step.ms)
		if got := len(lines) - before; got != step.newLines {
			t.Errorf("%+v: %d new log lines %q, want %d", step.ms, got, lines[before:], step.newLines)
		}
		if got := testutil.ToFloat64(gossipWatchersMismatched); got != float64(len(step.ms)) {
			t.Errorf("%+v: rebound_gossip_watchers_mismatched_agents = %v, want %d", step.ms, got, len(step.ms))
		}
	}
	if !strings.Contains(lines[0], "--gossip-watchers=2") || !strings.Contains(lines[0], "--gossip-watchers=3") {
		t.Errorf("log line %q does not name both flags' values", lines[0])
	}
}
