package e2e

import (
	"testing"
	"time"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// TestS13Series: the series `rebound-bench detect` measures, two deaths
// with the fast timings. Each death kills the node that holds the
// critical pod at that moment, at a random point of its Lease's renew
// interval; the node comes back and both planes see it alive before the
// next. The second death must kill where the first replacement went
// (never the Service's other endpoint's node), and each must be judged
// before the node grace.
func TestS13Series(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	c := startSandbox(t, 5, timings)
	ctx := testContext(t, 6*time.Minute)
	agents, _ := startS13Rebound(ctx, t, c, scenario.GossipAgentOptions{})
	tl := scenario.NewTimeline(testWriter(t))
	deaths, err := scenario.RunS13Series(ctx, c, tl, scenario.S13SeriesOptions{
		Workload: scenario.CriticalStandIn(s13Victim),
		Peer:     s13Peer,
		Deaths:   2,
		Kill:     func(n string) error { return agents[n].HostDeath() },
		Revive:   func(n string) error { return agents[n].HostRevive() },
		Agents:   c.NodeNames,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(deaths) != 2 {
		t.Fatalf("%d deaths measured, want 2", len(deaths))
	}
	if deaths[0].Victim != s13Victim {
		t.Errorf("the first death killed %s, not %s where the pod was placed", deaths[0].Victim, s13Victim)
	}
	if v := deaths[1].Victim; v == deaths[0].Victim || v == s13Peer {
		t.Errorf("the second death killed %s: the replacement should have gone to another node than %s and %s", v, deaths[0].Victim, s13Peer)
	}
	renew := timings.NodeLeaseDuration / 4
	for i, d := range deaths {
		if d.PlannedOffset < 0 || d.PlannedOffset >= renew {
			t.Errorf("death %d: drawn offset %v outside the renew interval [0, %v)", i+1, d.PlannedOffset, renew)
		}
		if !d.Replaced || d.Verdict >= timings.NodeMonitorGracePeriod || d.ReplacementReady >= timings.NodeMonitorGracePeriod {
			t.Errorf("death %d of %s: verdict %v, replacement Ready %v (replaced %v): not both before the %v node grace",
				i+1, d.Victim, d.Verdict, d.ReplacementReady, d.Replaced, timings.NodeMonitorGracePeriod)
		}
	}
}
