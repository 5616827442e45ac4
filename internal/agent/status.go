package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// Session states the agent reports besides BIRD's BGP states.
const (
	// StateNotConfigured: the peer is in the set but BIRD has no protocol
	// for it yet (the reload is pending, debounced or failed).
	StateNotConfigured = "NotConfigured"
	// StateDown: BIRD has the protocol but it shows no BGP state (it is
	// disabled, or shutting down).
	StateDown = "Down"
)

// sessions reads every peer's session from `show protocols`, with the
// time of its last state change resolved against BIRD's clock (status,
// read at readAt; see bird.SinceTime). Protocols of peers outside the set
// are ignored: a leftover session to a pruned node must not count. A since
// that cannot be resolved stays zero, and such a session is never
// evidence that a NotReady peer is alive.
func sessions(peers []bird.Peer, protos []bird.Protocol, status *bird.Status, readAt time.Time) []peering.Session {
	byName := make(map[string]bird.Protocol, len(protos))
	for _, p := range protos {
		byName[p.Name] = p
	}
	out := make([]peering.Session, 0, len(peers))
	for _, peer := range peers {
		s := peering.Session{Peer: peer.Name}
		p, ok := byName[bird.ProtocolName(peer.Address)]
		switch {
		case !ok:
			s.State = StateNotConfigured
		case p.BGPState() == "":
			s.State = StateDown
		default:
			s.State = p.BGPState()
		}
		if ok && status != nil {
			if at, err := bird.SinceTime(p.Since, status.ServerTime, readAt); err == nil {
				s.Since = at
			}
		}
		out = append(out, s)
	}
	return out
}

// bfdReader is the optional part of Control that reads `show bfd
// sessions`; bird.Client implements it.
type bfdReader interface {
	BFDSessions(ctx context.Context) ([]bird.BFDSession, error)
}

// ReadReport reads this node's BIRD into the report its agent writes: every
// peer's BGP session with the time of its last state change, its BFD
// session state when BFD runs, and whether BIRD is in graceful-restart
// recovery (a recovering BIRD's sessions say nothing about its peers).
// BIRD unreadable gives a report with Error set. The error return is
// what could not be read beside the sessions (status, BFD): the report is
// still valid, with those fields unknown.
func ReadReport(ctx context.Context, control Control, node string, peers []bird.Peer, doc *peering.PeerSet, now time.Time) (peering.Report, []peering.Session, error) {
	protos, err := control.Protocols(ctx)
	if err != nil {
		return peering.Report{Reporter: node, ObservedAt: now, SetGeneration: doc.Generation, Error: err.Error()}, nil, nil
	}
	var errs []error
	var status *bird.Status
	if st, serr := control.Status(ctx); serr == nil {
		status = &st
	} else {
		errs = append(errs, fmt.Errorf("BIRD status unreadable, session times unknown: %w", serr))
	}
	ss := sessions(peers, protos, status, now)
	if br, ok := control.(bfdReader); ok {
		if bfd, berr := br.BFDSessions(ctx); berr == nil {
			withBFD(ss, peers, bfd)
		} else if !strings.Contains(berr.Error(), "BFD") {
			// BIRD answers an error naming BFD when no BFD protocol runs.
			errs = append(errs, fmt.Errorf("show bfd sessions: %w", berr))
		}
	}
	ready := make(map[string]bool, len(doc.Peers))
	for _, p := range doc.Peers {
		ready[p.Name] = p.Ready
	}
	report := peering.CompactReport(node, now, doc.Generation, ss, func(peer string) bool { return ready[peer] })
	report.Recovering = status != nil && status.GracefulRestart != nil
	return report, ss, errors.Join(errs...)
}

// withBFD fills each session's BFD state from `show bfd sessions`, by the
// peer's address.
func withBFD(ss []peering.Session, peers []bird.Peer, bfd []bird.BFDSession) {
	byAddr := make(map[netip.Addr]string, len(bfd))
	for _, b := range bfd {
		byAddr[b.Address] = b.State
	}
	addr := make(map[string]netip.Addr, len(peers))
	for _, p := range peers {
		addr[p.Name] = p.Address
	}
	for i := range ss {
		ss[i].BFD = byAddr[addr[ss[i].Peer]]
	}
}

// sessionView is the agent's last read of BIRD, for /readyz.
type sessionView struct {
	err    string            // BIRD could not be read
	states map[string]string // peer in the set -> BGP state
	// unexpected are the members the set keeps while NotReady without
	// evidence of life (their grace, the leave budget): readiness does
	// not wait for them, as BIRD's start does not.
	unexpected map[string]bool
}

// unexpectedPeers lists the members of doc that no one expects to answer:
// NotReady and without published evidence of life.
func unexpectedPeers(doc *peering.PeerSet) map[string]bool {
	out := map[string]bool{}
	if doc == nil {
		return out
	}
	for _, p := range doc.Peers {
		if !p.Ready && p.Alive == "" {
			out[p.Name] = true
		}
	}
	return out
}

func viewOf(ss []peering.Session, err error) *sessionView {
	if err != nil {
		return &sessionView{err: err.Error()}
	}
	v := &sessionView{states: make(map[string]string, len(ss))}
	for _, s := range ss {
		v.states[s.Peer] = s.State
	}
	return v
}

// Readiness is the agent's answer to /readyz.
type Readiness struct {
	Ready  bool
	Reason string
}

// readiness decides /readyz from the last read of BIRD:
//
//   - BIRD could not be read: not ready, whatever else holds;
//   - every peer in the set is Established (or the set has no other
//     node): ready;
//   - the agent has been up for readyAfter or longer: ready, naming the
//     peers it stopped waiting for;
//   - otherwise: not ready, naming the peers it waits for.
//
// Only peers in the set that are expected to answer count: a dead node the
// controller left out, or keeps while NotReady without evidence of life
// (its grace, the leave budget), never holds a node back (the readiness
// confusion of seed 003).
func readiness(view *sessionView, up, readyAfter time.Duration) Readiness {
	if view == nil {
		return Readiness{Reason: "BIRD's sessions have not been read yet"}
	}
	if view.err != "" {
		return Readiness{Reason: "BIRD: " + view.err}
	}
	var waiting []string
	for peer, state := range view.states {
		if state != peering.StateEstablished && !view.unexpected[peer] {
			waiting = append(waiting, peer+" ("+state+")")
		}
	}
	slices.Sort(waiting)
	n := 0
	for peer := range view.states {
		if !view.unexpected[peer] {
			n++
		}
	}
	switch {
	case len(waiting) == 0 && n == 0:
		return Readiness{Ready: true, Reason: "no other node in the peer set"}
	case len(waiting) == 0:
		return Readiness{Ready: true, Reason: fmt.Sprintf("all %d peers in the set expected to answer Established", n)}
	case up >= readyAfter:
		return Readiness{Ready: true, Reason: fmt.Sprintf("up for %s (ready-after %s): not waiting any longer for %s", up.Round(time.Second), readyAfter, strings.Join(waiting, ", "))}
	}
	return Readiness{Reason: fmt.Sprintf("%d of %d peers in the set not Established: %s (ready anyway after %s up)", len(waiting), n, strings.Join(waiting, ", "), readyAfter)}
}
