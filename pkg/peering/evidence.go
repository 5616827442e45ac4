package peering

import (
	"fmt"
	"sort"
	"time"
)

// EvidenceOptions tune which reports count. The zero value means the
// defaults.
type EvidenceOptions struct {
	// ReportMaxAge: reports older than this are stale and ignored; zero
	// means DefaultReportMaxAge.
	ReportMaxAge time.Duration `json:"reportMaxAge,omitempty"`
	// MaxClockSkew: reports (or session times) further in the future than
	// this are ignored; zero means DefaultMaxClockSkew.
	MaxClockSkew time.Duration `json:"maxClockSkew,omitempty"`
}

// WithDefaults fills zero fields.
func (o EvidenceOptions) WithDefaults() EvidenceOptions {
	if o.ReportMaxAge <= 0 {
		o.ReportMaxAge = DefaultReportMaxAge
	}
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	return o
}

// Evidence is what the reports say about the NotReady nodes.
type Evidence struct {
	// Alive maps a NotReady node to why it counts as alive: a Ready
	// reporter's fresh report shows a BGP session Established with it that
	// was (re)established after the node went NotReady, or a BFD session
	// up. The text names the reporter and the times.
	Alive map[string]string
	// Down maps a NotReady node to a Ready reporter's fresh report, newer
	// than the node's NotReady transition, that shows its session with the
	// node not Established (and BFD not up): the data plane confirms what
	// the API says.
	Down map[string]string
	// Lost maps a Ready node to the evidence that the mesh has lost it
	// although the API has not noticed yet (a node is NotReady only after
	// node-monitor-grace-period; BFD notices in a second): every working
	// reporter (Ready, fresh, BIRD read and out of graceful-restart
	// recovery, at least one session Established) lists its session with
	// the node down, and there is at least one. The start rule of the
	// agent (internal/agent/start.go) leaves such a peer out of BIRD's
	// start.
	Lost map[string]string
	// StaleAt is the earliest time at which a report that counts now
	// stops counting (it ages out): the answer may change then without
	// any new input. Zero when no report counts.
	StaleAt time.Time
}

// AliveEvidence is the second, independent liveness signal (issue 9): for
// each NotReady node, whether live peers' BGP sessions say it is alive
// although the API says NotReady, or confirm that it is down. Pure: the
// peering planner, the recovery controller (rescue.Snapshot.BGPAlive) and
// diagnose call it with the same inputs and get the same answer.
//
// A report counts only when all of these hold, so that neither a dead
// node's last words, nor a stale cache, nor one lying agent can keep a
// dead node alive for ever:
//
//   - the reporter is another node (a node's own report never speaks for
//     itself), known and Ready now;
//   - the report has no BIRD error, is at most ReportMaxAge old, and not
//     more than MaxClockSkew in the future;
//   - the report was read after the subject's NotReady transition;
//   - for "alive": the session is Established and either BFD is up or
//     BIRD's since time for it is after the subject's NotReady transition
//     (and not in the future): a session that predates the transition may
//     only be waiting for its hold timer (240 s in BIRD) to notice a dead
//     peer. For "down": the session is not Established and BFD is not up.
//
// A lying reporter can keep a dead node alive only while it is itself
// Ready and refreshing its report; once it goes NotReady or its report
// ages out, the node is judged by the API alone.
func AliveEvidence(nodes []Node, reports []Report, now time.Time, opts EvidenceOptions) Evidence {
	opts = opts.WithDefaults()
	ev := Evidence{Alive: map[string]string{}, Down: map[string]string{}, Lost: map[string]string{}}
	byName := make(map[string]Node, len(nodes))
	notReady := 0
	for _, n := range nodes {
		if _, dup := byName[n.Name]; dup {
			continue
		}
		byName[n.Name] = n
		if !n.Ready {
			notReady++
		}
	}
	// Reporters in name order, so the reporter named is stable.
	sorted := make([]Report, len(reports))
	copy(sorted, reports)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Reporter < sorted[j].Reporter })
	for _, r := range sorted {
		reporter, known := byName[r.Reporter]
		if !known || !reporter.Ready || r.Error != "" || !reportFresh(r, now, opts) {
			continue
		}
		counted := false
		for _, s := range r.Sessions {
			subject, ok := byName[s.Peer]
			if !ok || subject.Ready || s.Peer == r.Reporter || !r.ObservedAt.After(subject.LastTransition) {
				continue
			}
			switch {
			case s.Established() && s.BFD == BFDUp:
				if _, done := ev.Alive[s.Peer]; !done {
					ev.Alive[s.Peer] = fmt.Sprintf("%s reports BGP Established and BFD Up with it at %s, after its NotReady transition at %s", r.Reporter, stamp(r.ObservedAt), stamp(subject.LastTransition))
				}
				counted = true
			case s.Established() && s.Since.After(subject.LastTransition) && !s.Since.After(r.ObservedAt.Add(opts.MaxClockSkew)):
				if _, done := ev.Alive[s.Peer]; !done {
					ev.Alive[s.Peer] = fmt.Sprintf("%s reports a BGP session Established with it since %s, after its NotReady transition at %s", r.Reporter, stamp(s.Since), stamp(subject.LastTransition))
				}
				counted = true
			case !s.Established() && s.BFD != BFDUp:
				if _, done := ev.Down[s.Peer]; !done {
					ev.Down[s.Peer] = fmt.Sprintf("%s reports its BGP session with it %s at %s", r.Reporter, s.State, stamp(r.ObservedAt))
				}
				counted = true
			}
		}
		if counted {
			at := r.ObservedAt.Add(opts.ReportMaxAge).Add(time.Millisecond)
			if ev.StaleAt.IsZero() || at.Before(ev.StaleAt) {
				ev.StaleAt = at
			}
		}
	}
	// Alive wins over down: one peer may have lost its session with a
	// node that others still reach.
	for node := range ev.Alive {
		delete(ev.Down, node)
	}
	lostByMesh(byName, sorted, now, opts, ev.Lost)
	return ev
}

// Reporter is one member of the mesh's view of its sessions: the input of
// LostByMesh.
type Reporter struct {
	Name string
	// Working: Ready, its report fresh, its BIRD out of graceful-restart
	// recovery and at least one of its sessions Established. A BIRD that
	// is itself starting knows nothing about anybody.
	Working bool
	// Sessions maps a peer name to "Established now" (BGP Established or
	// BFD up); a peer it says nothing about is absent.
	Sessions map[string]bool
}

// LostByMesh reports whether every working reporter other than peer that
// speaks of peer has lost it, and at least one does. One working reporter
// that still has the session keeps the peer; no working reporter says
// nothing.
func LostByMesh(peer string, reporters []Reporter) bool {
	seen := false
	for _, r := range reporters {
		if !r.Working || r.Name == peer {
			continue
		}
		up, configured := r.Sessions[peer]
		if !configured {
			continue
		}
		if up {
			return false
		}
		seen = true
	}
	return seen
}

// lostByMesh fills lost for the Ready nodes every working reporter has
// lost. Compact reports list a session with a Ready peer only when it is
// not Established, so a working reporter that does not list the node is
// taken to have it Established: the node is lost only when every working
// reporter lists it down.
func lostByMesh(byName map[string]Node, reports []Report, now time.Time, opts EvidenceOptions, lost map[string]string) {
	var reporters []Reporter
	for _, r := range reports {
		n, known := byName[r.Reporter]
		if !known || !n.Ready || r.Error != "" || r.Recovering || !reportFresh(r, now, opts) {
			continue
		}
		rep := Reporter{Name: r.Reporter, Working: r.Established > 0, Sessions: map[string]bool{}}
		for _, s := range r.Sessions {
			up := s.Established() || s.BFD == BFDUp
			rep.Sessions[s.Peer] = up
			rep.Working = rep.Working || up
		}
		reporters = append(reporters, rep)
	}
	for name, n := range byName {
		if !n.Ready {
			continue
		}
		working, by := 0, ""
		for _, r := range reporters {
			if !r.Working || r.Name == name {
				continue
			}
			working++
			if up, listed := r.Sessions[name]; !listed || up {
				working = -1
				break
			}
			if by == "" {
				by = r.Name
			}
		}
		if working > 0 {
			lost[name] = fmt.Sprintf("all %d working peers (%s, ...) report their session with it down, though it is Ready in the API", working, by)
		}
	}
}

// reportFresh: not older than ReportMaxAge, not further in the future
// than MaxClockSkew.
func reportFresh(r Report, now time.Time, opts EvidenceOptions) bool {
	if r.ObservedAt.IsZero() {
		return false
	}
	age := now.Sub(r.ObservedAt)
	return age <= opts.ReportMaxAge && age >= -opts.MaxClockSkew
}
