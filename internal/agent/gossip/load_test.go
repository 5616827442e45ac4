package gossip

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

var loadWindow = flag.Duration("gossip.window", 3*time.Minute,
	"BenchmarkGossipLoad: how long to measure the steady state; each member starts a push/pull every minute at 30 members and every 9 at 300, so a shorter window samples it")

// TestMeasureLoad30 runs 30 members and checks MeasureLoad's verdicts:
// detection within seconds, O(k) writes, and a per-agent cost of a few
// hundred bytes a second. The window is short, so push/pull is only
// sampled: BenchmarkGossipLoad measures it.
func TestMeasureLoad30(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("30 members for ~10 s")
	}
	r, err := MeasureLoad(context.Background(), 30, 3*time.Second, loadHosts(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	const k = liveness.DefaultWatchers
	if len(r.Watchers) != k {
		t.Errorf("the victim has %d watchers, want %d", len(r.Watchers), k)
	}
	if r.Detection <= 0 || r.Detection > 15*time.Second || r.DetectionAll < r.Detection {
		t.Errorf("detection %s (all %s): want a quorum within 15 s", r.Detection, r.DetectionAll)
	}
	if r.Writes < liveness.Quorum(k) || r.Writes > 2*k+2 {
		t.Errorf("%d writes for one death by 30 members, want %d..%d", r.Writes, liveness.Quorum(k), 2*k+2)
	}
	if r.SentPerSecond <= 0 || r.SentPerSecond > 4000 || r.ReceivedPerSecond <= 0 {
		t.Errorf("%.0f B/s sent, %.0f received per agent: want some, and under 4 kB/s", r.SentPerSecond, r.ReceivedPerSecond)
	}
}

// BenchmarkGossipLoad measures the gossip plane at 30 and 300 members in
// this process (each on its own 127.0.x.y): bytes per second per agent in
// the steady state, and the time from a SIGKILL-like death to a quorum of
// its watchers writing it Dead.
//
//	go test ./internal/agent/gossip -run '^$' -bench GossipLoad -benchtime 1x -gossip.window 3m
func BenchmarkGossipLoad(b *testing.B) {
	for _, n := range []int{30, 300} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			hosts := loadHosts(b)
			for b.Loop() {
				r, err := MeasureLoad(context.Background(), n, *loadWindow, hosts)
				if err != nil {
					b.Fatal(err)
				}
				b.Log(r)
				b.ReportMetric(r.SentPerSecond+r.ReceivedPerSecond, "B/s/agent")
				b.ReportMetric(r.SentPerSecond, "sent-B/s/agent")
				b.ReportMetric(r.StreamsPerSecond, "stream-B/s/agent")
				b.ReportMetric(r.MaxPerSecond, "max-B/s/agent")
				b.ReportMetric(r.Detection.Seconds(), "detect-s")
				b.ReportMetric(r.DetectionAll.Seconds(), "detect-all-s")
				b.ReportMetric(float64(r.Writes), "writes/death")
			}
		})
	}
}
