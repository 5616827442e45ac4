package liveness

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The agents' reports (agent -> controller). Each agent writes one
// PeeringReport object (api/v1alpha1, cluster-scoped, named after its
// node; pkg/peering/kube converts it to Report). Only the controller reads
// reports; a ValidatingAdmissionPolicy lets an agent write only its own.

// BGP and BFD states the rules read.
const (
	StateEstablished = "Established"
	BFDUp            = "Up"
	BFDDown          = "Down"
)

// Defaults of the report rules (Options).
const (
	// DefaultReportMaxAge is how old a report may be and still count:
	// three agent report intervals (a minute each by default), so one lost
	// write does not drop a live reporter.
	DefaultReportMaxAge = 3 * time.Minute
	// DefaultMaxClockSkew bounds how far in the future a report's times
	// may lie (agents' clocks against the controller's) before the report
	// is ignored as broken or lying.
	DefaultMaxClockSkew = 30 * time.Second
)

// Report is one agent's read of its BIRD, in the planner's form.
type Report struct {
	// Reporter is the node whose agent wrote the report (the object's name).
	Reporter string
	// ObservedAt is when the agent read BIRD (the agent's clock).
	ObservedAt time.Time
	// SetGeneration is the published set's generation the agent had applied.
	SetGeneration int64
	// Error is why BIRD could not be read; a report with an error says
	// nothing about sessions.
	Error string
	// ListenPort is the BGP port the reporter's BIRD listens on (agent
	// --listen-port); 0 means 179. It describes the reporter itself.
	ListenPort uint16
	// Recovering: the reporter's BIRD is in graceful-restart recovery
	// (starting): its sessions say nothing about other nodes yet.
	Recovering bool
	// Established counts the Established sessions with peers the set
	// marks Ready; they are not listed.
	Established int
	// Sessions lists the other sessions, sorted by peer.
	Sessions []Session
	// Gossip is the reporter's gossip read; nil when it does not gossip.
	// A gossip-only reporter (no BIRD) has a zero ObservedAt and no
	// sessions: it observes only through Gossip.
	Gossip *GossipReport
}

// Gossip states of a watched member.
const (
	// GossipAlive: the member answered this agent's direct probes at the
	// address the API holds for it.
	GossipAlive = "Alive"
	// GossipDead: the membership has it dead, and neither the member (at
	// the API's address) nor its host (the kubelet's port at the Node's
	// address) answered this agent's own probes: the host is silent.
	GossipDead = "Dead"
	// GossipMemberDown: the member does not answer but its host does (a
	// connection to the kubelet's port was accepted or refused: a live
	// kernel). The node lives; rebound's member on it does not (a
	// rollout, a crash, another key). It is no vote either way: it
	// abstains, and it is what the controller's disagreement read counts.
	GossipMemberDown = "MemberDown"
)

// GossipReport is one agent's first-hand read of the members it watches on
// the gossip ring (Watchers).
type GossipReport struct {
	// ObservedAt is when the agent wrote it (the agent's clock).
	ObservedAt time.Time
	// Members counts the members alive in the agent's membership.
	Members int
	// Watchers is the agent's k (--gossip-watchers), which must be the
	// controller's (Options.WatcherMismatches); zero when the agent did
	// not say.
	Watchers int
	// Watches are the members it watches, sorted by node.
	Watches []Watch
}

// Watch is what one agent's own probes say of one member.
type Watch struct {
	Node string
	// State is GossipAlive, GossipDead or GossipMemberDown.
	State string
	// Since is when the agent's probes first saw the member in State (the
	// agent's clock); zero when unknown.
	Since time.Time
}

// Of returns what the report says of node, if it watches it.
func (g *GossipReport) Of(node string) (Watch, bool) {
	if g == nil {
		return Watch{}, false
	}
	i, ok := slices.BinarySearchFunc(g.Watches, node, func(w Watch, n string) int { return cmp.Compare(w.Node, n) })
	if !ok {
		return Watch{}, false
	}
	return g.Watches[i], true
}

// SameContent reports whether two gossip reads say the same, whatever
// their ObservedAt.
func (g *GossipReport) SameContent(o *GossipReport) bool {
	if g == nil || o == nil {
		return g == o
	}
	return g.Members == o.Members && g.Watchers == o.Watchers && slices.EqualFunc(g.Watches, o.Watches, func(a, b Watch) bool {
		return a.Node == b.Node && a.State == b.State && a.Since.Equal(b.Since)
	})
}

// Validate names what a gossip read lacks to be read at all.
func (g *GossipReport) Validate(reporter string) error {
	if g == nil {
		return nil
	}
	var errs []error
	if g.ObservedAt.IsZero() {
		errs = append(errs, fmt.Errorf("report %s: gossip.observedAt is missing", reporter))
	}
	if g.Members < 0 {
		errs = append(errs, fmt.Errorf("report %s: gossip.members must not be negative", reporter))
	}
	for i, w := range g.Watches {
		switch {
		case w.Node == "":
			errs = append(errs, fmt.Errorf("report %s: gossip.watches[%d].node is empty", reporter, i))
		case w.Node == reporter:
			errs = append(errs, fmt.Errorf("report %s: gossip.watches[%d].node is the reporter itself: a node never speaks for itself", reporter, i))
		case i > 0 && g.Watches[i-1].Node >= w.Node:
			errs = append(errs, fmt.Errorf("report %s: gossip.watches[%d].node %q is listed twice or out of order (want sorted by node)", reporter, i, w.Node))
		}
		if w.State != GossipAlive && w.State != GossipDead && w.State != GossipMemberDown {
			errs = append(errs, fmt.Errorf("report %s: gossip.watches[%d].state %q: want %s, %s or %s", reporter, i, w.State, GossipAlive, GossipDead, GossipMemberDown))
		}
	}
	return errors.Join(errs...)
}

// Session is one BGP session of the reporter.
type Session struct {
	// Peer is the peer's node name.
	Peer string
	// State is the BGP state as BIRD shows it (Established, Active, ...),
	// or NotConfigured / Down.
	State string
	// Since is the session's last state change as BIRD shows it; zero when
	// unknown. A session counts as evidence only with a known Since.
	Since time.Time
	// BFD is the BFD session state, "" when BFD is not in use.
	BFD string
}

// Established reports whether the BGP session is up.
func (s Session) Established() bool { return s.State == StateEstablished }

// CompactReport builds the report an agent writes from every session it
// read: sessions Established with a peer the set marks Ready are only
// counted, all others listed. ready says which peers the set marks Ready.
//
// Why compact: at 1,000 nodes a full report is ~1,000 sessions, and every
// report change is an event for the controller. Listing only what can
// matter to a decision (sessions with NotReady peers, and sessions that
// are down) keeps a steady-state report at a few hundred bytes, and makes
// it change only when something the controller reads changes.
func CompactReport(reporter string, observedAt time.Time, generation int64, sessions []Session, ready func(peer string) bool) Report {
	r := Report{Reporter: reporter, ObservedAt: observedAt, SetGeneration: generation}
	for _, s := range sessions {
		if s.Established() && ready(s.Peer) {
			r.Established++
			continue
		}
		r.Sessions = append(r.Sessions, s)
	}
	slices.SortFunc(r.Sessions, func(a, b Session) int { return cmp.Compare(a.Peer, b.Peer) })
	return r
}

// SameContent reports whether two reports say the same, whatever their
// ObservedAt: an agent writes only when this is false or its last write
// is getting old.
func (r Report) SameContent(o Report) bool {
	if r.Reporter != o.Reporter || r.SetGeneration != o.SetGeneration || r.Error != o.Error || r.Recovering != o.Recovering || r.ListenPort != o.ListenPort || r.Established != o.Established || len(r.Sessions) != len(o.Sessions) {
		return false
	}
	for i := range r.Sessions {
		a, b := r.Sessions[i], o.Sessions[i]
		if a.Peer != b.Peer || a.State != b.State || !a.Since.Equal(b.Since) || a.BFD != b.BFD {
			return false
		}
	}
	return true
}

// Validate checks what a report must hold to be read at all: the
// reporter's name, the time, and peers named once each, each with a state.
// Each error names the field.
func (r Report) Validate() error {
	var errs []error
	if r.Reporter == "" {
		errs = append(errs, errors.New("report: metadata.name (the reporter node) is empty"))
	}
	if r.ObservedAt.IsZero() && r.Gossip == nil {
		errs = append(errs, fmt.Errorf("report %s: report.observedAt is missing", r.Reporter))
	}
	if r.ObservedAt.IsZero() && (len(r.Sessions) > 0 || r.Established > 0) {
		errs = append(errs, fmt.Errorf("report %s: report.peers without report.observedAt", r.Reporter))
	}
	errs = append(errs, r.Gossip.Validate(r.Reporter))
	if r.Established < 0 || r.SetGeneration < 0 {
		errs = append(errs, fmt.Errorf("report %s: report.established and report.setGeneration must not be negative", r.Reporter))
	}
	seen := make(map[string]bool, len(r.Sessions))
	for i, s := range r.Sessions {
		switch {
		case s.Peer == "":
			errs = append(errs, fmt.Errorf("report %s: report.peers[%d].node is empty", r.Reporter, i))
		case seen[s.Peer]:
			errs = append(errs, fmt.Errorf("report %s: report.peers[%d].node %q is listed twice", r.Reporter, i, s.Peer))
		case s.State == "" || strings.ContainsAny(s.State, " \t\r\n"):
			errs = append(errs, fmt.Errorf("report %s: report.peers[%d].state %q: want one word such as Established", r.Reporter, i, s.State))
		}
		seen[s.Peer] = true
	}
	return errors.Join(errs...)
}
