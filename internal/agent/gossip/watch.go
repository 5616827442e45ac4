package gossip

import (
	"maps"
	"net"
	"slices"
	"time"

	"rebound/pkg/liveness"
)

// The watch state: what this agent's own probes say of the members it
// watches. It is a plain state machine, fed by the membership (memberlist's
// events and its member list) and by this agent's direct probes, so that
// its rule can be tested without a network:
//
//   - A member the membership has alive is Alive.
//   - A member the membership has dead (or left, or forgotten) is probed
//     directly by this agent, and becomes Dead only when those probes go
//     unanswered too. Membership state is relayed: any member can gossip
//     another's death, so on its own it is never a vote.
//   - While the membership has it dead, it is probed again every recheck
//     interval: an answer makes it Alive (first-hand life outweighs
//     relayed death), and a later silence Dead again.
//   - The membership having it alive again (a rejoin, a refuted
//     suspicion) makes it Alive at once.

// memberView is what the membership says of one member this agent has
// seen alive at least once.
type memberView struct {
	addr    net.Addr
	alive   bool
	changed time.Time // when alive last changed, this agent's clock
}

// watchState is this agent's own read of one member it watches.
type watchState struct {
	// state is liveness.GossipAlive or GossipDead, or "" while a member
	// that entered the watch list with the membership having it dead has
	// not been probed yet: unknown, and so not reported.
	state string
	since time.Time
	// probeAt is when to probe it next; zero while the membership has it
	// alive.
	probeAt time.Time
	// contested: the membership has it dead, but it answered this agent's
	// probes (logged once).
	contested bool
}

// probeTarget is one direct probe to make.
type probeTarget struct {
	node string
	addr net.Addr
	// confirm: the probe may make the member Dead, so it is tried
	// several times; a Dead member's re-probe only looks for an answer.
	confirm bool
}

type tracker struct {
	self      string
	k         int
	retention time.Duration
	recheck   time.Duration

	members map[string]*memberView // every member seen alive, self excluded
	watches map[string]*watchState // the members self watches
	// ringChanged: a member was added to or forgotten from members since
	// the watch list was computed. Computing it sorts the ring by hash,
	// too much to do for nothing every probe interval at 1,000 members.
	ringChanged bool
	// pruneAt is when the first dead member's retention ends; zero when
	// none is dead.
	pruneAt time.Time
}

func newTracker(self string, k int, retention, recheck time.Duration) *tracker {
	return &tracker{self: self, k: k, retention: retention, recheck: recheck,
		members: map[string]*memberView{}, watches: map[string]*watchState{}}
}

// alive: the membership has node alive at addr.
func (t *tracker) alive(node string, addr net.Addr, now time.Time) {
	if node == t.self {
		return
	}
	v, ok := t.members[node]
	if !ok {
		v = &memberView{}
		t.members[node] = v
		t.ringChanged = true
	}
	v.addr = addr
	if !v.alive {
		v.alive, v.changed = true, now
	}
	if w := t.watches[node]; w != nil {
		if w.state != liveness.GossipAlive {
			w.state, w.since = liveness.GossipAlive, now
		}
		w.probeAt, w.contested = time.Time{}, false
	}
}

// dead: the membership has node dead or left, or no longer lists it. A
// member never seen alive is not taken in: this agent has nothing of its
// own to say about it.
func (t *tracker) dead(node string, now time.Time) {
	v, ok := t.members[node]
	if !ok || !v.alive {
		return
	}
	v.alive, v.changed = false, now
	if at := now.Add(t.retention); t.pruneAt.IsZero() || at.Before(t.pruneAt) {
		t.pruneAt = at
	}
	if w := t.watches[node]; w != nil {
		w.probeAt = now
	}
}

// update forgets members dead for longer than the retention and
// recomputes the watch list.
func (t *tracker) update(now time.Time) {
	if !t.pruneAt.IsZero() && now.After(t.pruneAt) {
		t.pruneAt = time.Time{}
		for n, v := range t.members {
			switch {
			case v.alive:
			case now.Sub(v.changed) > t.retention:
				delete(t.members, n)
				t.ringChanged = true
			case t.pruneAt.IsZero() || v.changed.Add(t.retention).Before(t.pruneAt):
				t.pruneAt = v.changed.Add(t.retention)
			}
		}
	}
	if !t.ringChanged {
		return
	}
	t.ringChanged = false
	watched := liveness.Watched(t.self, slices.Sorted(maps.Keys(t.members)), t.k)
	for n := range t.watches {
		if !slices.Contains(watched, n) {
			delete(t.watches, n)
		}
	}
	for _, n := range watched {
		if t.watches[n] != nil {
			continue
		}
		v := t.members[n]
		if v.alive {
			t.watches[n] = &watchState{state: liveness.GossipAlive, since: v.changed}
		} else {
			t.watches[n] = &watchState{probeAt: now}
		}
	}
}

// due returns the direct probes to make now.
func (t *tracker) due(now time.Time) []probeTarget {
	var out []probeTarget
	for _, n := range slices.Sorted(maps.Keys(t.watches)) {
		w, v := t.watches[n], t.members[n]
		if v.alive || w.probeAt.IsZero() || w.probeAt.After(now) {
			continue
		}
		out = append(out, probeTarget{node: n, addr: v.addr, confirm: w.state != liveness.GossipDead})
	}
	return out
}

// outcome is what one probe changed, for the log.
type outcome int

const (
	unchanged outcome = iota
	becameDead
	becameAlive
	// contested: the membership has the member dead, but it answered
	// (the first such answer of the episode).
	contested
)

// probed records a direct probe's outcome: answered, or every attempt
// unanswered. A probe that failed while the membership came to have the
// member alive again says nothing.
func (t *tracker) probed(node string, answered bool, now time.Time) outcome {
	w, v := t.watches[node], t.members[node]
	if w == nil || v == nil || v.alive {
		return unchanged
	}
	w.probeAt = now.Add(t.recheck)
	switch {
	case answered && w.state == liveness.GossipDead:
		w.state, w.since = liveness.GossipAlive, now
		return becameAlive
	case answered && !w.contested:
		w.contested = true
		if w.state == "" {
			w.state, w.since = liveness.GossipAlive, now
		}
		return contested
	case answered && w.state == "":
		w.state, w.since = liveness.GossipAlive, now
	case !answered && w.state != liveness.GossipDead:
		w.state, w.since, w.contested = liveness.GossipDead, now, false
		return becameDead
	}
	return unchanged
}

// report is the watch list as the report carries it: sorted by node, the
// members not probed yet left out.
func (t *tracker) report() []liveness.Watch {
	out := make([]liveness.Watch, 0, len(t.watches))
	for _, n := range slices.Sorted(maps.Keys(t.watches)) {
		if w := t.watches[n]; w.state != "" {
			out = append(out, liveness.Watch{Node: n, State: w.state, Since: w.since})
		}
	}
	return out
}

// counts is how many watched members are in each state, for /metrics.
func (t *tracker) counts() map[string]int {
	c := map[string]int{liveness.GossipAlive: 0, liveness.GossipDead: 0, "Unknown": 0}
	for _, w := range t.watches {
		if w.state == "" {
			c["Unknown"]++
		} else {
			c[w.state]++
		}
	}
	return c
}

// sameWatches compares two watch lists as SameContent does.
func sameWatches(a, b []liveness.Watch) bool {
	x, y := liveness.GossipReport{Watches: a}, liveness.GossipReport{Watches: b}
	return x.SameContent(&y)
}
