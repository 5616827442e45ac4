package unreachable

import (
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// TestPlanRestartMidIncidentKeepsTheRecord: the controller dies after
// marking node-3, which died; the new process starts as the controller
// does, with a fresh DistrustTracker, so early judgement is held for one
// --gossip-distrust-window (3 min). The first pass takes the mark off the
// still-Ready node (no verdict yet), and the hold keeps it from coming
// back before kube-controller-manager has the node NotReady (50 s after
// its death). From then on the mark is only kept, never added, so the
// incident's record, the key of pkg/rescue's one scale bounce per
// incident, is gone: the NotReady transition, later than the bounce's
// annotation, reads as a new incident and the Deployment the first
// process bounced is bounced again. Upstream never bounces; rebound's
// own once-per-incident rule breaks on a restart.
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
	got := Tainted(s.nodes[victim])
	if got == nil || got.TimeAdded == nil || !got.TimeAdded.Time.Equal(markedAt) {
		t.Fatalf("%s NotReady 20 s after a controller restart: mark %v, want the one added at %s kept (the incident's record)", victim, got, markedAt)
	}
}
