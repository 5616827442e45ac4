package e2e

import (
	"testing"
	"time"

	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

// s4BFDBound is the 2 s for a killed node's sessions to drop on
// every live peer with BFD on (detection 3 x 300 ms = 0.9 s).
const s4BFDBound = 2 * time.Second

// TestS4BFD: S4 with BFD on (the agent's default) and the dead nodes
// losing power (SIGSTOP: no TCP close, unlike a SIGKILL on loopback): the
// live peers drop their sessions with them by BFD, measured from the
// failure to the last session's state change by BIRD's own timestamps.
// BIRD 2 only: several BIRD 1.6 on one host share BFD's ports.
func TestS4BFD(t *testing.T) {
	bins := birdtest.Require(t, bird.Bird2)
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	tl := scenario.NewTimeline(testWriter(t))
	res, err := scenario.RunS4(ctx, tl, scenario.S4Options{
		Bins: bins, Nodes: 10, Net: 45, Rebound: true, Freeze: true, BFD: &bird.BFD{},
		GracefulRestartTime: 5, Cap: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	metric(t, "s4_bfd_session_down", res.SessionsDown.Seconds(), "s")
	if res.SessionsDown > s4BFDBound {
		t.Errorf("with BFD the live peers dropped the dead nodes' sessions %s after the failure, want <= %s", res.SessionsDown, s4BFDBound)
	}
	if !res.Recovered || res.Recovery() > s4ReturnBound {
		t.Errorf("B's routes %s after its BIRD started (recovered %v), want <= %s", res.Recovery(), res.Recovered, s4ReturnBound)
	}
	metric(t, "s4_bfd_return_with_rebound", res.Recovery().Seconds(), "s")
}
