package gossip

import (
	"fmt"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// witnessLoad is what one incident costs the agents: n nodes whose
// members all gossip, lost of them cut off from the API (their kubelets
// and agents together, as in S16) while their members still answer.
type witnessLoad struct {
	n, lost int
	// reach is how many agents still reach the API.
	reach int
	// Per agent that reaches the API, once every lost node is stale: the
	// lost nodes it witnesses (beyond its ring watches), and its direct
	// probes (pings) per second.
	witnessMean, witnessMax float64
	probesMean, probesMax   float64
	// Writes: every write of a read the incident caused, by the agents
	// that reach the API (the cut-off agents' writes cannot reach it),
	// over the whole incident; per writing agent, the most.
	writes, writers, writesMax int
	// Covered: lost nodes with an Alive read, written after their loss
	// by an agent that reaches the API; lossToRead is the longest time
	// from a node's loss to the first such write.
	covered    int
	lossToRead time.Duration
}

func (l witnessLoad) String() string {
	return fmt.Sprintf("%d nodes, %d lost, %d reach the API: per agent that reaches it %.1f witnessed (max %.0f), %.2f probes/s (max %.1f); "+
		"%d report writes for the incident by %d agents (at most %d each, %.2f per lost node); %d of %d lost nodes read Alive after their loss, the last %s after it",
		l.n, l.lost, l.reach, l.witnessMean, l.witnessMax, l.probesMean, l.probesMax,
		l.writes, l.writers, l.writesMax, float64(l.writes)/float64(l.lost), l.covered, l.lost, l.lossToRead)
}

// simulateWitnesses runs every agent's tracker and write rule (writeDue)
// on one simulated clock, a step every probe interval, through an
// incident: at T the Leases of the first lost nodes stop being renewed.
// The kubelets renew every 10 s at phases spread over the interval, so
// the losses are seen over about 10 s, as in a real cut. Every member
// answers its probes (the cut-off nodes live). The refresh every report
// interval is left out: the writes counted are the incident's.
func simulateWitnesses(n, lost int) witnessLoad {
	const (
		step     = DefaultProbeInterval
		recheck  = 4 * DefaultProbeInterval
		debounce = DefaultWriteDebounce
	)
	all := names("node", n)
	isLost := func(i int) bool { return i < lost }
	phase := func(i int) time.Duration { return time.Duration(i*7919%n) * renewInterval / time.Duration(n) }
	start := t0.Add(time.Hour)
	lastRenewal := func(i int, now time.Time) time.Time {
		if isLost(i) && now.After(start) {
			now = start
		}
		since := now.Sub(t0.Add(phase(i)))
		return now.Add(-since % renewInterval)
	}
	leasesAt := func(now time.Time) map[string]liveness.Lease {
		out := make(map[string]liveness.Lease, n)
		for i, name := range all {
			out[name] = liveness.Lease{RenewSeen: lastRenewal(i, now), RenewInterval: renewInterval}
		}
		return out
	}
	staleAt := make(map[string]time.Time, lost)
	for i := range lost {
		staleAt[all[i]] = liveness.Lease{RenewSeen: lastRenewal(i, start), RenewInterval: renewInterval}.StaleAt(liveness.DefaultLeaseMargin)
	}

	type agent struct {
		tr        *tracker
		last      []liveness.Watch
		lastRew   int
		rewrites  int
		lastWrite time.Time
		writes    int
		probes    int
	}
	book := bookOf(all...)
	agents := make([]*agent, n)
	for i, self := range all {
		tr := newTracker(book, self, liveness.DefaultWatchers, DefaultDeadRetention, recheck)
		for _, o := range all {
			tr.alive(o, t0)
		}
		tr.update(t0)
		agents[i] = &agent{tr: tr, last: tr.report(), lastWrite: start.Add(-time.Minute)}
	}

	res := witnessLoad{n: n, lost: lost, reach: n - lost}
	read := map[string]time.Time{}
	// The incident: from the cut until every loss was seen and read, and
	// a steady stretch after it where the probes are counted.
	end := start.Add(renewInterval + liveness.DefaultLeaseMargin + 20*time.Second)
	steadyFrom := end.Add(-10 * time.Second)
	for now := start; now.Before(end); now = now.Add(step) {
		leases := leasesAt(now)
		for i, a := range agents {
			a.tr.leasesSeen(leases, now)
			a.tr.update(now)
			for _, p := range a.tr.due(now) {
				if !now.Before(steadyFrom) {
					a.probes++
				}
				if p.witness {
					a.tr.probedWitness(p.node, memberAnswered, now)
				} else {
					a.tr.probed(p.node, memberAnswered, now)
				}
			}
			if a.tr.takeRewrite() {
				a.rewrites++
			}
			cur := a.tr.report()
			changed := !sameWatches(a.last, cur) || a.rewrites != a.lastRew
			if write, _ := writeDue(now, a.lastWrite, changed, debounce, time.Hour); !write || isLost(i) {
				continue
			}
			a.writes++
			a.last, a.lastRew, a.lastWrite = cur, a.rewrites, now
			for _, w := range cur {
				if at, ok := staleAt[w.Node]; ok && w.State == liveness.GossipAlive && !now.Before(at) {
					if _, seen := read[w.Node]; !seen {
						read[w.Node] = now
						res.lossToRead = max(res.lossToRead, now.Sub(at))
					}
				}
			}
		}
	}
	res.covered = len(read)
	steady := end.Sub(steadyFrom).Seconds()
	for i, a := range agents {
		if isLost(i) {
			continue
		}
		w := float64(len(a.tr.witnesses))
		p := float64(a.probes) / steady
		res.witnessMean += w / float64(res.reach)
		res.probesMean += p / float64(res.reach)
		res.witnessMax, res.probesMax = max(res.witnessMax, w), max(res.probesMax, p)
		res.writes += a.writes
		res.writesMax = max(res.writesMax, a.writes)
		if a.writes > 0 {
			res.writers++
		}
	}
	return res
}

// TestWitnessLoad measures an incident at the sizes the design names and
// holds its bounds: every lost node is read Alive by an agent that
// reaches the API within seconds of its loss; each writing agent writes
// a handful of times, not once per probe.
func TestWitnessLoad(t *testing.T) {
	for _, tc := range []struct {
		n, lost  int
		maxWrite int // per agent, for the incident
	}{
		{6, 5, 6},
		{100, 90, 12},
		{1000, 100, 6},
	} {
		if tc.n >= 1000 && testing.Short() {
			continue
		}
		l := simulateWitnesses(tc.n, tc.lost)
		t.Log(l)
		if l.covered != tc.lost {
			t.Errorf("%d nodes, %d lost: %d read Alive after their loss by an agent that reaches the API, want all", tc.n, tc.lost, l.covered)
		}
		if l.lossToRead > 3*time.Second {
			t.Errorf("%d nodes, %d lost: a lost node read Alive %s after its loss, want within 3 s", tc.n, tc.lost, l.lossToRead)
		}
		if l.writesMax > tc.maxWrite {
			t.Errorf("%d nodes, %d lost: an agent wrote %d times for the incident, want at most %d", tc.n, tc.lost, l.writesMax, tc.maxWrite)
		}
	}
}

// BenchmarkWitnessLoad reports the incident's figures as metrics:
// go test ./internal/agent/gossip -run '^$' -bench WitnessLoad -benchtime 1x
func BenchmarkWitnessLoad(b *testing.B) {
	for _, tc := range []struct{ n, lost int }{{100, 90}, {1000, 100}} {
		b.Run(fmt.Sprintf("%d_nodes_%d_lost", tc.n, tc.lost), func(b *testing.B) {
			var l witnessLoad
			for b.Loop() {
				l = simulateWitnesses(tc.n, tc.lost)
			}
			b.ReportMetric(l.probesMean, "probes/s/agent")
			b.ReportMetric(l.probesMax, "max-probes/s/agent")
			b.ReportMetric(l.witnessMax, "max-witnessed/agent")
			b.ReportMetric(float64(l.writes), "writes/incident")
			b.ReportMetric(float64(l.writesMax), "max-writes/agent/incident")
			b.ReportMetric(l.lossToRead.Seconds(), "s-loss-to-read")
			b.Log(l)
		})
	}
}
