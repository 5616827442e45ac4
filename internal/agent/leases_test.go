package agent

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"rebound/pkg/liveness"
)

// TestLeaseWatchTimesRenewalsOnTheAgentsClock: the agent's Lease plane is
// the controller's rule fed by a watch: each renewal timed when the
// agent saw it, never by the renew time the kubelet wrote; a Lease left
// unrenewed for the renew interval plus the margin is stale.
func TestLeaseWatchTimesRenewalsOnTheAgentsClock(t *testing.T) {
	cs := fake.NewClientset(nodeLease("node-a", agentT0.Add(-time.Hour)), nodeLease("node-b", agentT0.Add(-time.Hour)))
	clk := clocktesting.NewFakeClock(agentT0)
	w, err := NewLeaseWatch(cs, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l := w.Leases()
	if a := l["node-a"]; !a.RenewSeen.Equal(agentT0) || !a.FirstSight || a.RenewInterval != 10*time.Second {
		t.Fatalf("node-a first seen as %+v, want a first sight at the agent's clock with a 10 s renew interval", a)
	}
	clk.Step(5 * time.Second)
	renewed := nodeLease("node-a", agentT0.Add(-2*time.Hour)) // the kubelet's clock is off: only the change counts
	renewed.Spec.RenewTime = &metav1.MicroTime{Time: agentT0.Add(-2 * time.Hour)}
	if _, err := cs.CoordinationV1().Leases(NodeLeaseNamespace).Update(ctx, renewed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !w.Leases()["node-a"].RenewSeen.Equal(agentT0.Add(5 * time.Second)) {
		if time.Now().After(deadline) {
			t.Fatalf("the renewal was not seen within 10 s: %+v", w.Leases()["node-a"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	now := agentT0.Add(13 * time.Second)
	for node, stale := range map[string]bool{"node-a": false, "node-b": true} {
		at := w.Leases()[node].StaleAt(liveness.DefaultLeaseMargin)
		if got := !now.Before(at); got != stale {
			t.Errorf("%s at +13s: stale %v (stale at %s), want %v", node, got, at, stale)
		}
	}
}
