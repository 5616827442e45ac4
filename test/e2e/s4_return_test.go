package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

// S4, the return matrix: 10 BIRD nodes, 5 die (SIGKILL), one
// of them returns 10 s, 60 s and 300 s after the failure, with BIRD 1.6
// and BIRD 2, without and with rebound: 12 labs at the same time, run by
// scenario.RunS4Return, the code `rebound-bench s4 --return-after` runs.
//
// Without rebound B's configuration lists the dead peers and BIRD waits
// its whole 240 s `graceful restart wait`, whenever B returns. With
// rebound, B's agent renders the start set (peering.StartPeers): the dead
// peers are left out whether the API already calls them NotReady (60 s,
// 300 s) or not yet (10 s: every live member has lost them), so B's BIRD
// waits only for live peers.
//
// Measured from B's BIRD start until every live node has B's /26 (their
// BIRD tables) and B has every live node's /26 (B's kernel table, as
// root). Takes the last return plus the 240 s wait: about 10 minutes.
const (
	// s4ReturnGoal is the goal; s4ReturnBound adds slack for a
	// loaded machine.
	s4ReturnGoal  = 3 * time.Second
	s4ReturnBound = 6 * time.Second
)

func TestS4Return(t *testing.T) {
	bins := []birdtest.Binaries{birdtest.Require(t, bird.Bird16), birdtest.Require(t, bird.Bird2)}
	t.Parallel()
	ctx := testContext(t, 15*time.Minute)
	opts := scenario.S4ReturnOptions{
		Bins:        bins,
		ReturnAfter: []time.Duration{10 * time.Second, 60 * time.Second, 300 * time.Second},
		FirstNet:    33,
		NetNS:       os.Geteuid() == 0,
	}
	lanes := scenario.RunS4Return(ctx, opts)
	scenario.WriteS4ReturnTable(os.Stdout, lanes)
	if err := scenario.WriteS4ReturnMetrics(os.Stdout, lanes); err != nil {
		t.Error(err)
	}
	for _, l := range lanes {
		if why := s4ReturnProblem(l); why != "" {
			t.Errorf("%s: %s", l.Name(), why)
			for _, e := range l.Events {
				t.Logf("%s %6.1fs %-6s %s %s", l.Name(), e.At.Seconds(), e.Kind, e.Subject, e.Detail)
			}
		}
	}
}

// s4ReturnProblem says what is wrong with a lane, "" when nothing.
func s4ReturnProblem(l scenario.S4Lane) string {
	r := l.Result
	switch {
	case l.Err != nil:
		return l.Err.Error()
	case !r.Recovered:
		return fmt.Sprintf("B and the live nodes lack each other's routes %s after B's BIRD started", r.Cap)
	case l.Rebound && r.Recovery() > s4ReturnBound:
		return fmt.Sprintf("traffic through B flows %s after its BIRD started, want <= %s (goal %s); B started with %v",
			r.Recovery(), s4ReturnBound, s4ReturnGoal, r.StartPeers)
	case l.Rebound && len(r.StartPeers) != r.Nodes-r.Dead:
		return fmt.Sprintf("B's BIRD started with %v, want the %d live nodes", r.StartPeers, r.Nodes-r.Dead)
	case !l.Rebound && r.Recovery() < s4WithoutAtLeast:
		return fmt.Sprintf("without rebound routes came %s after B's BIRD started; the seed's failure holds them ~240 s (want >= %s)",
			r.Recovery(), s4WithoutAtLeast)
	}
	return ""
}
