// Package liveness answers the one question both of rebound's destructive
// acts rest on: is a NotReady node dead, or only cut off from the API?
//
// Deleting a critical pod on a NotReady node and leaving a node out of the
// BGP mesh are each worse than upstream's stall when the node is alive and
// only the API lost it. So every planner (pkg/rescue, pkg/peering,
// diagnose) reads one verdict per node from Assess, built from two
// independent planes:
//
//   - the API: the Ready condition, timed by rebound's own observations
//     (Input.FirstSeen), never by the clock of the kubelet that wrote the
//     transition;
//   - the node network: the BGP (and BFD) sessions that the other nodes'
//     agents report.
//
// No single node, report or clock decides. Death needs a quorum of the
// fresh, Ready observers; any one of them with a live session vetoes it, so
// a liar can at most keep a node in (upstream's behaviour), never take one
// out. Assess is pure: no client, no logger, no clock.
package liveness

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Verdict is what rebound believes about one node.
type Verdict string

// Verdicts.
const (
	// Alive: the node is Ready in the API.
	Alive Verdict = "Alive"
	// CutOffFromAPI: NotReady in the API, yet a fresh Ready observer shows
	// first-hand life since the transition (BFD up, a session
	// re-established after it, or one Established past BIRD's hold time
	// after it). Its pods may still run; nothing that needs it dead is
	// done.
	CutOffFromAPI Verdict = "CutOffFromAPI"
	// Dead: NotReady, a quorum of the fresh Ready observers reports its
	// sessions down, and none reports one up.
	Dead Verdict = "Dead"
	// Unknown: NotReady without corroboration either way: rebound knows
	// what upstream knows, and times what it does as upstream would.
	Unknown Verdict = "Unknown"
)

// DefaultHoldTime is BIRD's default BGP hold time (also Calico's): a
// session with a dead peer stays Established up to this long, so only a
// session still Established this long after the NotReady transition is
// proof of life on its own.
const DefaultHoldTime = 240 * time.Second

// Node is what the model reads of a Node object.
type Node struct {
	Name string
	// Ready is true when the Ready condition is True.
	Ready bool
	// Transition is the Ready condition's lastTransitionTime: written by
	// the kubelet (its clock) when it reports NotReady itself, by
	// kube-controller-manager when the node stops posting.
	Transition time.Time
}

// Input is what Assess decides from.
type Input struct {
	Nodes   []Node
	Reports []Report
	// FirstSeen maps a node to when this process first saw it in its
	// current Ready state (Tracker). A node's clock never starts before
	// it: a kubelet clock ten minutes behind, or a controller restarted
	// during an incident, must not make a fresh NotReady look old. nil
	// means the caller has no history (a one-shot CLI): the API's times
	// are taken as they are, and the verdict says so.
	FirstSeen map[string]time.Time
	// Leases maps a node to what rebound saw of its Lease (LeaseTracker);
	// a node missing has no Lease plane: it is never judged early.
	Leases map[string]Lease
	// Distrust is the caller's history of the planes' disagreements
	// (DistrustTracker): each node's distrust window, and the hold of a
	// process that just started. nil means the caller keeps none (a
	// one-shot CLI): only the disagreements of this snapshot hold.
	Distrust *Distrust
	Options  Options
}

// NodeVerdict is one node's verdict with its evidence. Its texts name no
// report's read time, so that a verdict published in the peer set does
// not change with every report refresh.
type NodeVerdict struct {
	Verdict Verdict `json:"verdict"`
	// Since is when the node entered its current Ready state on rebound's
	// clock: the later of the Ready condition's transition and
	// Input.FirstSeen. Every NotReady clock (maxUnavailableTime, the
	// prune grace) counts from it.
	Since time.Time `json:"since"`
	// DownSince is, for a Dead node, when the data plane lost it: Since,
	// or earlier when a quorum of at least two observers reports BFD down
	// with times (the quorum-th earliest of them). Zero unless Dead.
	DownSince time.Time `json:"downSince,omitzero"`
	// Veto names a fresh Ready observer that reports a session with the
	// node Established or BFD up: with it the node never leaves the mesh.
	Veto string `json:"veto,omitempty"`
	// Reason says why, in words, naming reporters and times.
	Reason string `json:"reason"`
	// Observers counts the fresh Ready reporters that may vote on the
	// node; DownVotes and UpVotes how many did, each way, after Since.
	Observers int `json:"observers"`
	DownVotes int `json:"downVotes"`
	UpVotes   int `json:"upVotes"`

	// The Lease plane: when rebound last saw the node's Lease renewed (its
	// own clock), and whether that is longer ago than the renew interval
	// plus Options.LeaseMargin. Zero and false without a Lease plane.
	LeaseRenewSeen time.Time `json:"leaseRenewSeen,omitzero"`
	LeaseStale     bool      `json:"leaseStale,omitempty"`
	// LeaseStaleAt is when the Lease goes (or went) stale without a new
	// renewal: LeaseRenewSeen plus the renew interval and the margin.
	LeaseStaleAt time.Time `json:"leaseStaleAt,omitzero"`
	// LeaseFirstSight: LeaseRenewSeen is rebound's first sight of the
	// Lease (a restart), no renewal it watched (Lease.FirstSight).
	LeaseFirstSight bool `json:"leaseFirstSight,omitempty"`
	// The gossip plane: how many agents watch the node on the gossip ring
	// and how many of them, by their own direct probes, say it is dead
	// or alive.
	GossipWatchers int `json:"gossipWatchers,omitempty"`
	GossipDown     int `json:"gossipDown,omitempty"`
	GossipUp       int `json:"gossipUp,omitempty"`
	// GossipWitnesses counts the reporters beyond its ring watchers that
	// reach the API (Ready, their Lease renewing) and have it Alive in a
	// read after its loss: first-hand life, never a vote for death.
	GossipWitnesses int `json:"gossipWitnesses,omitempty"`
	// Early: Dead on both planes (Lease stale and a quorum of its gossip
	// watchers, none alive) while the API still has the node Ready, its
	// node grace period not run out.
	Early bool `json:"early,omitempty"`
	// DetectedAt is, for a Dead verdict the two planes support, when the
	// Lease went stale on rebound's clock: the verdict's moment, from
	// which policies with spec.detection TwoPlanes count
	// maxUnavailableTime. Zero otherwise.
	DetectedAt time.Time `json:"detectedAt,omitzero"`
	// HeldUntil: its gossip plane would have made it Dead, but is not
	// trusted until then (its distrust window, or the cluster-wide
	// hold); Reason says which. Zero otherwise.
	HeldUntil time.Time `json:"heldUntil,omitzero"`
}

// Assessment is the verdict for every node.
type Assessment struct {
	Nodes map[string]NodeVerdict
	// Lost maps a Ready node to the evidence that every working reporter
	// has lost its sessions with it although the API has not noticed yet
	// (kube-controller-manager marks a node NotReady only after its node
	// grace period). The agent's start rule leaves such a peer out of
	// BIRD's start; nothing destructive reads it.
	Lost map[string]string
	// StaleAt is the earliest time a report that counts now ages out: the
	// answer may change then without any new input. Zero when none counts.
	StaleAt time.Time
	// Disagreements maps each node on which the gossip plane disagrees
	// with the Lease plane now to why.
	Disagreements map[string]Disagreement
	// Distrusted maps each node whose gossip plane is not trusted (a
	// WatchersSayDead disagreement now or within the distrust window)
	// to when that ends.
	Distrusted map[string]time.Time
	// Hold is the cluster-wide stop of early judgement, if any.
	Hold Hold
}

// Of returns the verdict for a node; a node the assessment does not know
// is Unknown.
func (a Assessment) Of(name string) NodeVerdict {
	if v, ok := a.Nodes[name]; ok {
		return v
	}
	return NodeVerdict{Verdict: Unknown, Reason: "not in the snapshot"}
}

// Quorum is how many of n observers must agree that a node is dead: a
// majority, so at least two where two exist.
func Quorum(n int) int { return n/2 + 1 }

// Assess computes one verdict per node. A report counts only when all of
// these hold: it is another node's (a node never speaks for itself), the
// reporter is known and Ready now, the report carries no BIRD error, its
// BIRD is out of graceful-restart recovery, and it is at most ReportMaxAge
// old and not more than MaxClockSkew in the future. Such a reporter is an
// observer of every NotReady node; it votes on one only with a report read
// after the node's Since, and abstains otherwise (an abstention still
// counts against the quorum, so that one fast liar cannot decide before
// the honest reports arrive).
func Assess(in Input, now time.Time) Assessment {
	opts := in.Options.WithDefaults()
	byName := make(map[string]Node, len(in.Nodes))
	order := make([]string, 0, len(in.Nodes))
	for _, n := range in.Nodes {
		if _, dup := byName[n.Name]; dup {
			continue
		}
		byName[n.Name] = n
		order = append(order, n.Name)
	}
	out := Assessment{Nodes: make(map[string]NodeVerdict, len(byName)), Lost: map[string]string{},
		Disagreements: map[string]Disagreement{}, Distrusted: map[string]time.Time{}}

	// Observers, in reporter order so that the names in reasons are
	// stable.
	observers := make([]Report, 0, len(in.Reports))
	for _, r := range in.Reports {
		reporter, known := byName[r.Reporter]
		if known && reporter.Ready && r.Error == "" && !r.Recovering && fresh(r, now, opts) {
			observers = append(observers, r)
		}
	}
	slices.SortStableFunc(observers, func(a, b Report) int { return cmp.Compare(a.Reporter, b.Reporter) })
	p := newPlanes(in, byName, now, opts)
	p.distrust(order, in.Distrust, &out)

	// One pass over the observers' sessions tallies every NotReady node's
	// votes: O(sessions), not O(NotReady nodes x reports x sessions).
	tallies := make(map[string]*tally)
	for _, name := range order {
		n := byName[name]
		since := n.Transition
		if seen, ok := in.FirstSeen[name]; ok && seen.After(since) {
			since = seen
		}
		if n.Ready {
			out.Nodes[name] = p.judgeReady(name, NodeVerdict{Verdict: Alive, Since: since, Reason: "Ready in the API"})
			continue
		}
		tallies[name] = &tally{since: since, lastVoter: -1, allBFD: true}
	}
	counted := map[string]bool{} // reporters whose report decided something
	for i, r := range observers {
		for _, s := range r.Sessions {
			t := tallies[s.Peer]
			if t == nil || t.lastVoter == i || !r.ObservedAt.After(t.since) {
				// Not a NotReady node, a second listing in one report, or a
				// report read before the node went NotReady (it abstains).
				continue
			}
			t.lastVoter = i
			counted[r.Reporter] = true
			t.vote(s, r, opts)
		}
	}
	for name, t := range tallies {
		out.Nodes[name] = p.judgeNotReady(name, t.verdict(len(observers), in.FirstSeen == nil))
	}
	if !p.staleAt.IsZero() && (out.StaleAt.IsZero() || p.staleAt.Before(out.StaleAt)) {
		out.StaleAt = p.staleAt
	}
	for _, r := range observers {
		if counted[r.Reporter] {
			at := r.ObservedAt.Add(opts.ReportMaxAge).Add(time.Millisecond)
			if out.StaleAt.IsZero() || at.Before(out.StaleAt) {
				out.StaleAt = at
			}
		}
	}
	lostByMesh(byName, observers, out.Lost)
	return out
}

// tally is one NotReady node's votes.
type tally struct {
	since     time.Time
	lastVoter int // index of the last observer that voted, so one report votes once
	down, up  int
	veto      string
	life      string
	bfdDown   []time.Time // the down voters' BFD-down times
	allBFD    bool        // every down voter gave one
}

func (t *tally) vote(s Session, r Report, opts Options) {
	if s.Established() || s.BFD == BFDUp {
		t.up++
		if t.veto == "" {
			t.veto = fmt.Sprintf("%s reports its session with it %s (BFD %s)", r.Reporter, s.State, orNone(s.BFD))
		}
		if why := firstHandLife(s, r, t.since, opts); why != "" && t.life == "" {
			t.life = why
		}
		return
	}
	t.down++
	if s.BFD == BFDDown && !s.Since.IsZero() && !s.Since.After(r.ObservedAt) {
		t.bfdDown = append(t.bfdDown, s.Since)
	} else {
		t.allBFD = false
	}
}

// verdict judges one NotReady node from its tally and the number of
// observers (every fresh Ready reporter: a NotReady node is none of them).
func (t *tally) verdict(observers int, noHistory bool) NodeVerdict {
	v := NodeVerdict{Verdict: Unknown, Since: t.since, Observers: observers, DownVotes: t.down, UpVotes: t.up}
	clock := "rebound's own observation"
	if noHistory {
		clock = "the API's transition (no observation history)"
	}
	since := t.since
	q := Quorum(observers)
	switch {
	case t.life != "":
		v.Verdict, v.Veto = CutOffFromAPI, t.veto
		v.Reason = fmt.Sprintf("NotReady since %s (%s), but alive: %s", stamp(since), clock, t.life)
	case t.veto != "":
		v.Veto = t.veto
		v.Reason = fmt.Sprintf("NotReady since %s (%s); not dead while a live observer has a session with it: %s", stamp(since), clock, t.veto)
	case observers > 0 && t.down >= q:
		v.Verdict, v.DownSince = Dead, since
		v.Reason = fmt.Sprintf("NotReady since %s (%s), and %d of %d fresh Ready observers report its sessions down (quorum %d), none up", stamp(since), clock, t.down, observers, q)
		if t.allBFD && q >= 2 && len(t.bfdDown) >= q {
			// The quorum agrees on a time only as far as its q-th earliest
			// member does: each says "down since t", so q of them agree
			// on the q-th smallest t. A lone observer's time never moves
			// a clock: no single report decides.
			slices.SortFunc(t.bfdDown, func(a, b time.Time) int { return a.Compare(b) })
			if at := t.bfdDown[q-1]; at.Before(since) {
				v.DownSince = at
				v.Reason += fmt.Sprintf("; their BFD lost it by %s, before the API noticed", stamp(at))
			}
		}
	case observers == 0:
		v.Reason = fmt.Sprintf("NotReady since %s (%s); no fresh Ready observer reports on it, so the API alone speaks", stamp(since), clock)
	default:
		v.Reason = fmt.Sprintf("NotReady since %s (%s); %d of %d fresh Ready observers report its sessions down, short of the quorum of %d", stamp(since), clock, t.down, observers, q)
	}
	return v
}

// firstHandLife says why an up session is proof of life on its own, or "":
// BFD up; a session (re-)established after the node went NotReady; or one
// Established through BIRD's hold time after it (a dead peer's session
// ends within the hold time).
func firstHandLife(s Session, r Report, since time.Time, opts Options) string {
	switch {
	case s.BFD == BFDUp:
		return fmt.Sprintf("%s reports BFD Up with it after its NotReady transition at %s", r.Reporter, stamp(since))
	case s.Established() && s.Since.After(since) && !s.Since.After(r.ObservedAt.Add(opts.MaxClockSkew)):
		return fmt.Sprintf("%s reports a BGP session Established with it since %s, after its NotReady transition at %s", r.Reporter, stamp(s.Since), stamp(since))
	case s.Established() && r.ObservedAt.Sub(since) >= opts.HoldTime:
		return fmt.Sprintf("%s reports a BGP session Established with it more than the %s hold time after its NotReady transition at %s", r.Reporter, opts.HoldTime, stamp(since))
	}
	return ""
}

// session finds a listed session with peer.
func (r Report) session(peer string) (Session, bool) {
	for _, s := range r.Sessions {
		if s.Peer == peer {
			return s, true
		}
	}
	return Session{}, false
}

// lostByMesh fills lost for the Ready nodes every working reporter has
// lost. Compact reports list a session with a Ready peer only when it is
// not Established, so a working reporter that does not list the node is
// taken to have it Established: the node is lost only when every working
// reporter lists it down, and at least one does.
func lostByMesh(byName map[string]Node, observers []Report, lost map[string]string) {
	for name, n := range byName {
		if !n.Ready {
			continue
		}
		working, by := 0, ""
		for _, r := range observers {
			if r.Reporter == name || !r.working() {
				continue
			}
			s, listed := r.session(name)
			if !listed || s.Established() || s.BFD == BFDUp {
				working = -1
				break
			}
			working++
			if by == "" {
				by = r.Reporter
			}
		}
		if working > 0 {
			lost[name] = fmt.Sprintf("all %d working peers (%s, ...) report their session with it down, though it is Ready in the API", working, by)
		}
	}
}

// working: the reporter has at least one live session, so its view of the
// others means something (a BIRD cut off from everything knows nothing).
func (r Report) working() bool {
	if r.Established > 0 {
		return true
	}
	for _, s := range r.Sessions {
		if s.Established() || s.BFD == BFDUp {
			return true
		}
	}
	return false
}

func fresh(r Report, now time.Time, opts Options) bool { return freshAt(r.ObservedAt, now, opts) }

func orNone(s string) string {
	if s == "" {
		return "not in use"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}
