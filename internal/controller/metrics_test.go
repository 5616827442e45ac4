package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rebound/pkg/peering"
	"rebound/pkg/rescue"
)

func TestOldestStrandedDeadlines(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pods := []rescue.CriticalPod{
		{Policy: "a", Stranded: true, Decision: rescue.DecisionAct, Deadline: t0.Add(20 * time.Second)},
		{Policy: "a", Stranded: true, Decision: rescue.DecisionWaitingForFencing, Deadline: t0.Add(10 * time.Second)},
		// Replaced, skipped and not-yet-stranded pods do not count.
		{Policy: "a", Stranded: true, Decision: rescue.DecisionReplaced, Deadline: t0},
		{Policy: "b", Stranded: true, Decision: rescue.DecisionSkip, Deadline: t0},
		{Policy: "c", Stranded: false, Decision: rescue.DecisionNotYet, Deadline: t0},
		{Policy: "d", Stranded: true, Decision: rescue.DecisionInFlight, Deadline: t0.Add(5 * time.Second)},
	}
	got := oldestStrandedDeadlines(pods)
	want := map[string]time.Time{"a": t0.Add(10 * time.Second), "d": t0.Add(5 * time.Second)}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if !got[k].Equal(v) {
			t.Errorf("policy %s: %v, want %v", k, got[k], v)
		}
	}
}

func TestObservePeeringNodes(t *testing.T) {
	res := peering.Result{
		Decisions: []peering.Decision{
			{Name: "n0", InSet: true}, {Name: "n1", InSet: true}, {Name: "n2", Reason: peering.OutNotReady},
			{Name: "gone", Reason: peering.OutDeleted},
		},
	}
	observePeeringNodes("test", res)
	if v := testutil.ToFloat64(peerSetNodes.WithLabelValues("test")); v != 3 {
		t.Errorf("nodes = %v, want 3 (a deleted node is no candidate)", v)
	}
}
