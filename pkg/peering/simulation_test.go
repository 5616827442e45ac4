package peering

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// readiness says whether the simulated node is Ready at a time, and when its
// Ready condition last changed.
type readiness func(at time.Time) (ready bool, lastTransition time.Time)

// flapping is Ready for up, then NotReady for down, again and again from
// start until stop; Ready before start and from stop on.
func flapping(start, stop time.Time, up, down time.Duration) readiness {
	return func(at time.Time) (bool, time.Time) {
		if at.Before(start) {
			return true, start.Add(-time.Hour)
		}
		if !at.Before(stop) {
			at = stop // the flapping ends Ready at stop (see below)
		}
		period := up + down
		cycles := at.Sub(start) / period
		cycleStart := start.Add(cycles * period)
		if at.Equal(stop) {
			return true, stop
		}
		if at.Sub(cycleStart) < up {
			return true, cycleStart
		}
		return false, cycleStart.Add(up)
	}
}

// timedChange is a set change and when the planner made it.
type timedChange struct {
	at time.Time
	Change
}

// simulation drives Plan like a controller that re-plans every tick, which
// observes more often than a real one (it re-plans on events and at
// NextCheck), so it sees every change a real one could make.
type simulation struct {
	t       *testing.T
	cfg     Config
	steady  []string      // nodes Ready throughout
	flapper string        // the node that flaps
	flap    readiness     // its readiness over time
	from    time.Time     // first plan (the bootstrap)
	until   time.Time     // last plan
	tick    time.Duration // time between plans
	// replan runs Plan twice at every tick to prove it deterministic; the
	// long sweeps leave it off to stay quick.
	replan bool

	state   State         // carried from plan to plan, as the controller does
	changes []timedChange // changes after the bootstrap plan
}

func (s *simulation) run() {
	s.t.Helper()
	bootstrapped := false
	for now := s.from; !now.After(s.until); now = now.Add(s.tick) {
		nodes := make([]Node, 0, len(s.steady)+1)
		for i, name := range s.steady {
			nodes = append(nodes, Node{Name: name, Address: addr(i + 1), Ready: true, LastTransition: s.from.Add(-time.Hour)})
		}
		ready, lt := s.flap(now)
		nodes = append(nodes, Node{Name: s.flapper, Address: addr(200), Ready: ready, LastTransition: lt})

		in := Input{Nodes: nodes, State: s.state, Config: s.cfg}
		res := Plan(in, now)
		if s.replan {
			if again := Plan(in, now); !reflect.DeepEqual(again, res) {
				s.t.Fatalf("%v: Plan gave two different results for one input", now)
			}
		}
		if bootstrapped {
			for _, c := range res.Changes {
				s.changes = append(s.changes, timedChange{at: now, Change: c})
			}
		}
		bootstrapped = true
		members := map[string]bool{}
		for _, p := range res.Peers {
			members[p.Name] = true
		}
		for _, name := range s.steady {
			if !members[name] {
				s.t.Fatalf("%v: Ready node %s is not in the set", now, name)
			}
		}
		if ready && !members[s.flapper] {
			s.t.Fatalf("%v: %s is Ready but not in the set (rejoin must be immediate)", now, s.flapper)
		}
		s.state = res.State
	}
}

// maxChangesIn returns the most changes of one node within any closed
// interval of length d.
func maxChangesIn(changes []timedChange, name string, d time.Duration) int {
	var times []time.Time
	for _, c := range changes {
		if c.Name == name {
			times = append(times, c.at)
		}
	}
	most := 0
	for i := range times {
		n := 0
		for j := i; j < len(times) && !times[j].After(times[i].Add(d)); j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

// checkBounds asserts the documented bound for several interval lengths and
// that steady nodes never changed.
func checkBounds(t *testing.T, cfg Config, s *simulation) {
	t.Helper()
	for _, c := range s.changes {
		if c.Name != s.flapper {
			t.Fatalf("Ready node %s changed: %+v", c.Name, c)
		}
	}
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute} {
		got, bound := maxChangesIn(s.changes, s.flapper, d), cfg.MaxChanges(d)
		if got > bound {
			t.Errorf("%d changes of %s within %v, documented bound MaxChanges(%v) = %d", got, s.flapper, d, d, bound)
		}
	}
}

// TestS6FlappingNode is scenario S6: a node flaps Ready/NotReady every 10 s
// for 2 minutes among Ready nodes. The grace period absorbs every NotReady
// spell, so the set never changes; the documented bound is 3 per minute.
func TestS6FlappingNode(t *testing.T) {
	cfg := Config{}
	start := t0
	s := &simulation{
		t:       t,
		cfg:     cfg,
		steady:  []string{"node-0", "node-1", "node-2", "node-4"},
		flapper: "node-3",
		flap:    flapping(start, start.Add(2*time.Minute), 10*time.Second, 10*time.Second),
		from:    start.Add(-time.Minute),
		until:   start.Add(5 * time.Minute),
		tick:    time.Second,
		replan:  true,
	}
	s.run()
	checkBounds(t, cfg, s)
	if len(s.changes) != 0 {
		t.Errorf("a 10 s flap changed the set %d times, want 0: %+v", len(s.changes), s.changes)
	}
	if got := cfg.MaxChanges(time.Minute); got != 3 {
		t.Errorf("documented bound MaxChanges(1m) = %d, want 3", got)
	}
	t.Logf("METRIC s6_set_changes_10s_flap_2min=%d count", len(s.changes))
	t.Logf("CONFIG s6_set_changes_bound_per_minute=%d count", cfg.MaxChanges(time.Minute))
}

// TestFlapDampingBound sweeps flap shapes, including NotReady spells just
// past the grace period, which do change the set, and checks the bound.
func TestFlapDampingBound(t *testing.T) {
	for _, cfg := range []Config{{}, {PruneGracePeriod: 10 * time.Second, FlapWindow: 3 * time.Minute, MaxPruneGracePeriod: time.Minute}} {
		for _, down := range []time.Duration{40, 41, 45, 60, 81, 100, 161, 200, 301} {
			for _, up := range []time.Duration{1, 10, 30, 120} {
				name := fmt.Sprintf("grace=%v/down=%ds/up=%ds", cfg.WithDefaults().PruneGracePeriod, down, up)
				t.Run(name, func(t *testing.T) {
					s := &simulation{
						t: t, cfg: cfg,
						steady:  []string{"a", "b"},
						flapper: "f",
						flap:    flapping(t0, t0.Add(30*time.Minute), up*time.Second, down*time.Second),
						from:    t0.Add(-time.Minute), until: t0.Add(40 * time.Minute),
						tick: time.Second,
					}
					s.run()
					checkBounds(t, cfg, s)
				})
			}
		}
	}
}

// TestFlapDampingRandom drives random Ready/NotReady spells for 2 hours.
func TestFlapDampingRandom(t *testing.T) {
	cfg := Config{}
	rng := rand.New(rand.NewPCG(7, 11))
	for run := 0; run < 20; run++ {
		// Precompute spells: alternating Ready/NotReady of 1..400 s.
		type spell struct {
			start time.Time
			ready bool
		}
		var spells []spell
		at, ready := t0, true
		for at.Before(t0.Add(2 * time.Hour)) {
			spells = append(spells, spell{at, ready})
			at = at.Add(time.Duration(1+rng.IntN(400)) * time.Second)
			ready = !ready
		}
		flap := func(now time.Time) (bool, time.Time) {
			cur := spell{t0.Add(-time.Hour), true}
			for _, sp := range spells {
				if sp.start.After(now) {
					break
				}
				cur = sp
			}
			return cur.ready, cur.start
		}
		s := &simulation{
			t: t, cfg: cfg, steady: []string{"a"}, flapper: "f", flap: flap,
			from: t0, until: t0.Add(2 * time.Hour), tick: 2 * time.Second,
		}
		s.run()
		checkBounds(t, cfg, s)
	}
}

func TestPruneGraceAndBounds(t *testing.T) {
	cfg := Config{}
	wantGrace := []time.Duration{40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for k, want := range wantGrace {
		if got := cfg.PruneGrace(k); got != want {
			t.Errorf("PruneGrace(%d) = %v, want %v", k, got, want)
		}
	}
	for _, tc := range []struct {
		d        time.Duration
		removals int
		changes  int
	}{
		{0, 1, 3},
		{time.Minute, 1, 3},
		{80 * time.Second, 2, 5},
		{2 * time.Minute, 2, 5},
		{10*time.Minute - time.Nanosecond, 4, 9},
		{10 * time.Minute, 8, 17}, // two flap windows' worth
		{time.Hour, 28, 57},
	} {
		if got := cfg.MaxRemovals(tc.d); got != tc.removals {
			t.Errorf("MaxRemovals(%v) = %d, want %d", tc.d, got, tc.removals)
		}
		if got := cfg.MaxChanges(tc.d); got != tc.changes {
			t.Errorf("MaxChanges(%v) = %d, want %d", tc.d, got, tc.changes)
		}
	}
}
