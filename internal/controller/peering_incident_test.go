package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// TestPeeringIncidentEdges: the controller as installed (the stop
// switch, no state, a fresh tracker, the Lease plane or none), at the
// edges where the set could collapse in one step.
func TestPeeringIncidentEdges(t *testing.T) {
	// seven nodes: a, b and c Ready and gossiping (every NotReady node's
	// three watchers), d..g NotReady for an hour, Dead in all three
	// watchers' gossip reads.
	seven := func() []client.Object {
		var objs []client.Object
		for i, name := range []string{"a", "b", "c", "d", "e", "f", "g"} {
			objs = append(objs, peeringTestNode(name, fmt.Sprintf("10.0.0.%d", i+1), i < 3, peeringT0.Add(-time.Hour), nil))
		}
		return objs
	}
	gossip := func(now time.Time) []client.Object {
		var objs []client.Object
		for _, w := range []string{"a", "b", "c"} {
			g := liveness.GossipReport{ObservedAt: now, Members: 7}
			for _, n := range []string{"d", "e", "f", "g"} {
				g.Watches = append(g.Watches, liveness.Watch{Node: n, State: liveness.GossipDead, Since: peeringT0.Add(-time.Hour)})
			}
			objs = append(objs, kube.GossipToAPI(w, g))
		}
		return objs
	}
	// leasePlane: a, b and c renewing now, d..g last seen renewed an
	// hour ago, on rebound's clock.
	leasePlane := func(now time.Time) *liveness.LeaseTracker {
		lt := &liveness.LeaseTracker{}
		for _, n := range []string{"d", "e", "f", "g"} {
			lt.Observe(n, peeringT0.Add(-time.Hour), 40*time.Second, now.Add(-time.Hour))
		}
		for _, n := range []string{"a", "b", "c"} {
			lt.Observe(n, now, 40*time.Second, now)
		}
		return lt
	}
	tests := []struct {
		name  string
		nodes []client.Object
		// reports are created at the pass that counts.
		reports func(now time.Time) []client.Object
		leases  func(now time.Time) *liveness.LeaseTracker
		// stopped: the stop switch is pulled at install and released
		// this much later.
		stopped    time.Duration
		wantOut    int // nodes labelled out of the set
		wantFrozen bool
	}{
		{
			// rebound installed during an incident (no state ConfigMap,
			// no labels), the stop switch pulled, released past the
			// prune grace: the members the state does not know are in
			// Calico's default mesh, and 2 of 3 leaving at once freeze.
			name: "installed during an incident, the stop switch released past the grace: frozen, nobody labelled out",
			nodes: []client.Object{
				peeringTestNode("a", "10.0.0.1", true, peeringT0.Add(-time.Hour), nil),
				peeringTestNode("b", "10.0.0.2", false, peeringT0.Add(-time.Hour), nil),
				peeringTestNode("c", "10.0.0.3", false, peeringT0.Add(-time.Hour), nil),
			},
			stopped:    2 * time.Minute,
			wantFrozen: true,
		},
		{
			name:       "gossip quorum without the Lease plane: one plane, no confirmation: frozen",
			nodes:      seven(),
			reports:    gossip,
			wantFrozen: true,
		},
		{
			name:    "gossip quorum and the Lease plane stale: two planes confirm; the budget lets 3 of 7 leave",
			nodes:   seven(),
			reports: gossip,
			leases:  leasePlane,
			wantOut: 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(tc.nodes...).Build()
			clk := clocktesting.NewFakeClock(peeringT0)
			r, _ := newPeeringForTest(c, clk)
			r.opts.Tracker = &liveness.Tracker{} // installed now: first sight is now
			stop := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultPeeringNamespace, Name: "rebound-stop"}}
			r.opts.StopSwitch = types.NamespacedName{Namespace: stop.Namespace, Name: stop.Name}
			run := func() {
				t.Helper()
				if _, err := r.Reconcile(ctx, peeringKey); err != nil {
					t.Fatal(err)
				}
			}
			if tc.stopped > 0 {
				if err := c.Create(ctx, stop); err != nil {
					t.Fatal(err)
				}
				run()
				clk.Step(tc.stopped)
				if err := c.Delete(ctx, stop); err != nil {
					t.Fatal(err)
				}
			} else {
				run() // first sight of every node
				clk.Step(2 * time.Minute)
			}
			if tc.reports != nil {
				for _, o := range tc.reports(clk.Now()) {
					if err := c.Create(ctx, o); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.leases != nil {
				r.opts.Leases = tc.leases(clk.Now())
			}
			run()

			out := 0
			for name, v := range peeringLabels(t, c) {
				if v == "false" {
					out++
				} else if v != "true" {
					t.Errorf("%s labelled %q", name, v)
				}
			}
			res := r.LastPlan()
			if out != tc.wantOut || res.Frozen != tc.wantFrozen {
				t.Fatalf("%d labelled out, frozen %v (%s); want %d out, frozen %v: peers %v", out, res.Frozen, res.FrozenReason, tc.wantOut, tc.wantFrozen, res.PeerNames())
			}
			if len(res.Peers) < res.Floor {
				t.Errorf("%d peers below the floor %d", len(res.Peers), res.Floor)
			}
		})
	}
}
