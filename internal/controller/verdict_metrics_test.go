package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

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
