package controller

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// The executor's re-check asks the judge again right before a delete:
// Peek gives the verdicts Assess would at that moment and records
// nothing, so a re-check moves no first sight, no history of reads and
// no disagreement that the planners' passes count from.
func TestJudgePeekRecordsNothing(t *testing.T) {
	ctx := context.Background()
	t0 := peeringT0
	var objs []client.Object
	var nodes []*corev1.Node
	for i, name := range []string{"a", "b", "c", "d"} {
		n := peeringTestNode(name, fmt.Sprintf("10.0.0.%d", i+1), name != "d", t0.Add(-time.Hour), nil)
		objs, nodes = append(objs, n), append(nodes, n)
	}
	// a, b and c watch d and read it Dead; a's read is new at t0+5s.
	reads := func(at time.Time) []client.Object {
		var out []client.Object
		for _, w := range []string{"a", "b", "c"} {
			g := liveness.GossipReport{ObservedAt: at, Members: 4, Watches: []liveness.Watch{{Node: "d", State: liveness.GossipDead, Since: t0.Add(-time.Hour)}}}
			out = append(out, kube.GossipToAPI(w, g))
		}
		return out
	}
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(append(objs, reads(t0)...)...).Build()
	leases := &liveness.LeaseTracker{}
	for _, n := range []string{"a", "b", "c"} {
		leases.Observe(n, t0, 40*time.Second, t0)
	}
	leases.Observe("d", t0.Add(-time.Hour), 40*time.Second, t0.Add(-time.Hour))
	tracker, distrust := &liveness.Tracker{}, liveness.NewDistrustTracker(t0.Add(-time.Hour))
	j := NewJudge(c, tracker, leases, distrust, nil, liveness.Options{Watchers: 3})

	// A Peek first: d's NotReady is not first seen by it.
	peeked := j.Peek(ctx, nodes, t0)
	if got := tracker.Peek(kube.LivenessNodes(nodes), t0.Add(time.Minute))["d"]; !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("after a Peek, d's NotReady counts from %v: Peek recorded a first sight", got)
	}
	if d := distrust.Distrust(t0); len(d.DeadSeen) != 0 || len(d.LastSaid) != 0 {
		t.Errorf("after a Peek the history holds %v / %v: Peek recorded reads", d.DeadSeen, d.LastSaid)
	}
	assessed := j.Assess(ctx, nodes, t0)
	if !reflect.DeepEqual(peeked.Nodes, assessed.Nodes) {
		t.Errorf("Peek and Assess at the same moment disagree:\nPeek   %+v\nAssess %+v", peeked.Nodes, assessed.Nodes)
	}
	seen := distrust.Distrust(t0)
	if len(seen.DeadSeen) == 0 {
		t.Fatal("Assess recorded no read: the test shows nothing")
	}

	// Later, with a new read: Peek at t0+5s sees what Assess would, and
	// the history still holds only what Assess recorded.
	later := t0.Add(5 * time.Second)
	for _, o := range reads(later) {
		if err := c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
		o.SetResourceVersion("")
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	peeked = j.Peek(ctx, nodes, later)
	if d := distrust.Distrust(later); !reflect.DeepEqual(d.DeadSeen, seen.DeadSeen) {
		t.Errorf("a Peek changed the reads' first sights:\nbefore %v\nafter  %v", seen.DeadSeen, d.DeadSeen)
	}
	assessed = j.Assess(ctx, nodes, later)
	if !reflect.DeepEqual(peeked.Nodes, assessed.Nodes) {
		t.Errorf("Peek and Assess at %v disagree:\nPeek   %+v\nAssess %+v", later, peeked.Nodes, assessed.Nodes)
	}
	if v := assessed.Of("d"); v.Verdict != liveness.Dead {
		t.Errorf("d = %s (%s), want Dead: the case is not the one meant", v.Verdict, v.Reason)
	}
}
