package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/pkg/liveness"
	"rebound/pkg/peering"
)

// TestPeeringReadsTheOneJudge: with PeeringOptions.Liveness set, the
// peering planner reads the shared judge's verdicts and judges nothing
// itself. b is NotReady past the prune grace with no report the planner
// could read; the judge (whose witnesses the recovery planner reads too)
// has it CutOffFromAPI: it stays in. Without the judge the planner's own
// view prunes it, as it did when it judged a slice of its own.
func TestPeeringReadsTheOneJudge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		judge  bool
		wantB  string
		called bool
	}{
		{name: "the one judge says CutOffFromAPI: b stays in", judge: true, wantB: "true", called: true},
		{name: "no judge wired: the planner's own view, b pruned", judge: false, wantB: "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
				peeringTestNode("a", "10.0.0.1", true, peeringT0.Add(-time.Hour), nil),
				peeringTestNode("b", "10.0.0.2", false, peeringT0.Add(-time.Minute), nil),
			).Build()
			r, _ := newPeeringForTest(c, clocktesting.NewFakeClock(peeringT0))
			called := false
			if tc.judge {
				r.opts.Liveness = func(_ context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment {
					called = true
					if len(nodes) != 2 || !now.Equal(peeringT0) {
						t.Errorf("judge asked about %d nodes at %v, want every node at the pass's time", len(nodes), now)
					}
					return liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{
						"a": {Verdict: liveness.Alive},
						"b": {Verdict: liveness.CutOffFromAPI, Since: peeringT0.Add(-time.Minute), Reason: "node-a, a witness that reaches the API, has it Alive"},
					}}
				}
			}
			if _, err := r.Reconcile(ctx, peeringKey); err != nil {
				t.Fatal(err)
			}
			if called != tc.called {
				t.Errorf("judge called %v, want %v", called, tc.called)
			}
			if got := peeringLabels(t, c)["b"]; got != tc.wantB {
				t.Errorf("b's %s = %q, want %q", peering.LabelInSet, got, tc.wantB)
			}
		})
	}
}
