package gossip

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"rebound/pkg/liveness"
)

// The watch state: what this agent's own probes say of the members it
// watches. It is a plain state machine, fed by the membership (memberlist's
// events), by the address book (what the API holds for each node) and by
// this agent's probes, so that its rule can be tested without a network:
//
//   - A member the membership has alive is Alive. memberlist takes a
//     member alive only at the address the book holds for it (the alive
//     delegate refuses any other), so that is where it was heard.
//   - A member the membership has dead, left or forgotten is probed by
//     this agent, at the book's addresses only: the membership's state
//     is relayed, any key holder can forge it, so it only triggers the
//     probes. DefaultProbeAttempts pings of the member; if it answers one
//     it is Alive. If none is answered, one probe of its host (the
//     kubelet's port at the Node's address): a host that answers, even by
//     refusing, is a live kernel, and the member is MemberDown (no vote:
//     a rollout, a crash, another key). Only a silent host makes it Dead.
//   - No member address in the book: no probe, state unknown. No host
//     address, or a host probe that learned nothing: unknown too. Unknown
//     is not reported: no vote either way (fail open).
//   - While the membership has it dead, it is probed again every recheck
//     interval, and each re-probe moves it to Alive, MemberDown or Dead
//     by the same rule (a Dead member's re-probe pings it once).
//   - The membership having it alive again (a rejoin, a refuted
//     suspicion) makes it Alive at once.

// memberView is what the membership says of one member this agent has
// seen alive at least once.
type memberView struct {
	alive   bool
	changed time.Time // when alive last changed, this agent's clock
}

// watchState is this agent's own read of one member it watches.
type watchState struct {
	// state is liveness.GossipAlive, GossipMemberDown or GossipDead, or ""
	// while unknown: a member that entered the watch list with the
	// membership having it dead and not probed yet, or one whose probes
	// could not be made or said nothing. Unknown is not reported.
	state string
	since time.Time
	// probeAt is when to probe it next; zero while the membership has it
	// alive.
	probeAt time.Time
	// contested: the membership has it dead, but it answered this agent's
	// probes (logged once).
	contested bool
	// silentSince is when this episode's first silence was seen: kept
	// through probes that learned nothing, cleared by any answer and by
	// the membership having the member alive again. A Dead
	// vote's since is the first silence, so that a path broken for
	// minutes never reports a death seconds old, one the controller
	// could not refute with the Lease renewals it saw since.
	silentSince time.Time
	// lossProbe: the Lease plane lost this member while the membership
	// has it alive and this agent has it Alive; one direct probe (a
	// confirming one) is due, and its answer asks for a rewrite of the
	// read (tracker.leasesSeen). Silence changes nothing: the membership
	// decides, as ever, whether the member is to be probed as dead.
	lossProbe bool
}

// probeTarget is one probe to make, at the book's addresses.
type probeTarget struct {
	node   string
	member netip.AddrPort
	// host is invalid when the book has none: the member's silence then
	// makes no vote.
	host netip.AddrPort
	// confirm: the probe may make the member Dead, so its pings are tried
	// DefaultProbeAttempts times; a Dead member's re-probe only looks for
	// an answer.
	confirm bool
	// witness: a probe of a node the Lease plane lost, which self
	// witnesses (probedWitness).
	witness bool
}

// probeResult is one probe's outcome.
type probeResult int

const (
	// memberAnswered: the member answered a ping at the book's address.
	memberAnswered probeResult = iota
	// hostAnswered: the member did not, its host did.
	hostAnswered
	// hostSilent: neither the member nor its host answered.
	hostSilent
	// hostUnknown: the member did not answer and the host could not be
	// probed (no address in the book) or its probe said nothing.
	hostUnknown
)

type tracker struct {
	book      AddressBook
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

	// The witnesses (witness.go). margin is the Lease plane's
	// (liveness.DefaultLeaseMargin unless set).
	margin time.Duration
	// lost and renewing are the nodes whose Lease is stale, and those
	// whose Lease renews, at the last leasesSeen; leases what it saw.
	lost, renewing map[string]bool
	leases         map[string]liveness.Lease
	// witnesses are the lost nodes self witnesses, beside its ring
	// watches (never the same node).
	witnesses map[string]*watchState
	// witnessChanged: the Lease plane or the ring changed since the
	// witness list was computed.
	witnessChanged bool
	// rewrite: write the read again though it says the same.
	rewrite bool
	// ring is self and the members in ring order, nil until computed
	// after a change; ringAt each one's place in it.
	ring   []string
	ringAt map[string]int
}

func newTracker(book AddressBook, self string, k int, retention, recheck time.Duration) *tracker {
	return &tracker{book: book, self: self, k: k, retention: retention, recheck: recheck, margin: liveness.DefaultLeaseMargin,
		members: map[string]*memberView{}, watches: map[string]*watchState{}, witnesses: map[string]*watchState{}}
}

// alive: the membership has node alive.
func (t *tracker) alive(node string, now time.Time) {
	if node == t.self {
		return
	}
	v, ok := t.members[node]
	if !ok {
		v = &memberView{}
		t.members[node] = v
		t.ringChanged = true
	}
	if !v.alive {
		v.alive, v.changed = true, now
	}
	if w := t.watches[node]; w != nil {
		if w.state != liveness.GossipAlive {
			w.state, w.since = liveness.GossipAlive, now
		}
		if !w.lossProbe {
			w.probeAt = time.Time{}
		}
		// A member alive again ends the episode: its next death is
		// silent from its own first silence, not from this one's (a Dead
		// vote dated before the Lease renewals made in between reads,
		// to the controller, as a lie).
		w.contested, w.silentSince = false, time.Time{}
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
	// A witness probes on its own schedule, whatever the membership
	// says; a departure only makes its next probe come now.
	if w := t.witnesses[node]; w != nil {
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
	if t.ringChanged {
		t.ringChanged, t.ring, t.witnessChanged = false, nil, true
		t.ringWatches(now)
	}
	if t.witnessChanged {
		t.witnessList(now)
	}
}

// ringWatches recomputes the members self watches on the ring.
func (t *tracker) ringWatches(now time.Time) {
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

// due returns the probes to make now, at the book's addresses. A member
// the book has no address for is not probed: its state becomes unknown
// until the book has one.
func (t *tracker) due(now time.Time) []probeTarget {
	var out []probeTarget
	for _, n := range slices.Sorted(maps.Keys(t.watches)) {
		w, v := t.watches[n], t.members[n]
		if (v.alive && !w.lossProbe) || w.probeAt.IsZero() || w.probeAt.After(now) {
			continue
		}
		member, ok := t.book.Member(n)
		if !ok && v.alive {
			w.lossProbe, w.probeAt = false, time.Time{}
			continue
		}
		if !ok {
			w.probeAt = now.Add(t.recheck)
			if w.state != "" {
				w.state, w.since, w.contested = "", now, false
			}
			continue
		}
		host, _ := t.book.Host(n)
		out = append(out, probeTarget{node: n, member: member, host: host, confirm: w.state != liveness.GossipDead})
	}
	for _, n := range slices.Sorted(maps.Keys(t.witnesses)) {
		w := t.witnesses[n]
		if w.probeAt.After(now) {
			continue
		}
		member, ok := t.book.Member(n)
		if !ok {
			w.probeAt = now.Add(t.recheck)
			w.state, w.since = "", now
			continue
		}
		host, _ := t.book.Host(n)
		out = append(out, probeTarget{node: n, member: member, host: host, confirm: w.state != liveness.GossipDead, witness: true})
	}
	return out
}

// outcome is what one probe changed, for the log.
type outcome int

const (
	unchanged outcome = iota
	becameDead
	becameMemberDown
	becameAlive
	becameUnknown
	// contested: the membership has the member dead, but it answered
	// (the first such answer of the episode).
	contested
)

// probed records a probe's outcome. A probe that ended while the
// membership came to have the member alive again says nothing.
func (t *tracker) probed(node string, r probeResult, now time.Time) outcome {
	w, v := t.watches[node], t.members[node]
	if w != nil && w.lossProbe {
		w.lossProbe = false
		if v != nil && v.alive {
			w.probeAt = time.Time{}
			switch {
			case r == memberAnswered && w.state == liveness.GossipAlive:
				t.rewrite = true
			case t.lost[node]:
				// Not answered (a lost packet, a busy member), or only its
				// host: look again while the Lease plane has it lost, or a
				// live member would have no Alive read after its loss
				// until the next refresh, and a short policy would act.
				w.lossProbe, w.probeAt = true, now.Add(t.recheck)
			}
			return unchanged
		}
	}
	if w == nil || v == nil || v.alive {
		return unchanged
	}
	w.probeAt = now.Add(t.recheck)
	if r != memberAnswered {
		w.contested = false
	}
	if r == memberAnswered || r == hostAnswered {
		w.silentSince = time.Time{}
	}
	switch r {
	case memberAnswered:
		switch {
		case w.state == liveness.GossipDead || w.state == liveness.GossipMemberDown:
			w.state, w.since = liveness.GossipAlive, now
			return becameAlive
		case !w.contested:
			w.contested = true
			if w.state == "" {
				w.state, w.since = liveness.GossipAlive, now
			}
			return contested
		case w.state == "":
			w.state, w.since = liveness.GossipAlive, now
		}
	case hostAnswered:
		if w.state != liveness.GossipMemberDown {
			w.state, w.since = liveness.GossipMemberDown, now
			return becameMemberDown
		}
	case hostSilent:
		if w.silentSince.IsZero() {
			w.silentSince = now
		}
		if w.state != liveness.GossipDead {
			w.state, w.since = liveness.GossipDead, w.silentSince
			return becameDead
		}
	case hostUnknown:
		if w.state != "" {
			w.state, w.since = "", now
			return becameUnknown
		}
	}
	return unchanged
}

// report is the watch list as the report carries it: the ring watches and
// the witness reads, sorted by node, the members not probed yet left out.
func (t *tracker) report() []liveness.Watch {
	out := make([]liveness.Watch, 0, len(t.watches)+len(t.witnesses))
	for _, ws := range []map[string]*watchState{t.watches, t.witnesses} {
		for n, w := range ws {
			if w.state != "" {
				out = append(out, liveness.Watch{Node: n, State: w.state, Since: w.since})
			}
		}
	}
	slices.SortFunc(out, func(a, b liveness.Watch) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// counts is how many members in ws are in each state, for /metrics.
func counts(ws map[string]*watchState) map[string]int {
	c := map[string]int{liveness.GossipAlive: 0, liveness.GossipDead: 0, liveness.GossipMemberDown: 0, "Unknown": 0}
	for _, w := range ws {
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
