package unreachable

import (
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// TestPlanRestartMidIncidentKeepsTheRecord: the controller dies after
// marking node-3, which died; the new process starts as the controller
// does, with a fresh history, so early judgement is held (one
// --gossip-distrust-window, and no early judgement of a node whose Lease
// it has not watched renew). The mark comes off the still-Ready node and
// stays off until kube-controller-manager has it NotReady: fail open,
// upstream's behaviour. Accepted: the incident's record the mark kept is
// kept instead by the scale bounce's own rule (rescue.BounceCovers allows
// one node grace between the bounce and the NotReady transition;
// rescue's TestBounceCoversAfterARestart), so the Deployment the first
// process bounced is not bounced again.
func TestPlanRestartMidIncidentKeepsTheRecord(t *testing.T) {
	s := newSim(t, 5)
	const victim = "node-3"
	s.die(victim)
	s.run(40*time.Second, time.Second, nil)
	mark := Tainted(s.nodes[victim])
	if mark == nil || mark.TimeAdded == nil {
		t.Fatalf("setup: %s not marked 40 s after its death", victim)
	}
	markedAt := mark.TimeAdded.Time

	// The restart: no Lease history, no disagreement history.
	s.restartedAt = s.now
	s.distrust = &liveness.Distrust{Since: s.now}
	notReadyAt := t0.Add(50 * time.Second)
	s.run(70*time.Second, time.Second, func() {
		if !s.now.Before(notReadyAt) && readyNode(s.nodes[victim]) {
			s.nodes[victim].Status.Conditions = node(victim, false).Status.Conditions
		}
	})
	if readyNode(s.nodes[victim]) {
		t.Fatalf("setup: %s still Ready", victim)
	}
	if got := Tainted(s.nodes[victim]); got != nil {
		t.Fatalf("%s after a controller restart: mark %v (added before at %s), want none: the new process has watched no renewal of its Lease, so it does not judge it early", victim, got, markedAt)
	}
}
