package agent

import (
	"fmt"
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

// sessionStates maps every peer of the set to its session state, read from
// `show protocols`. Protocols of peers outside the set are ignored: a
// leftover session to a pruned node must not count.
func sessionStates(peers []bird.Peer, protos []bird.Protocol) map[string]string {
	byName := make(map[string]bird.Protocol, len(protos))
	for _, p := range protos {
		byName[p.Name] = p
	}
	out := make(map[string]string, len(peers))
	for _, peer := range peers {
		p, ok := byName[bird.ProtocolName(peer.Address)]
		switch {
		case !ok:
			out[peer.Name] = StateNotConfigured
		case p.BGPState() == "":
			out[peer.Name] = StateDown
		default:
			out[peer.Name] = p.BGPState()
		}
	}
	return out
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
// Only peers in the set count: a dead node the controller left out never
// holds a node back (the readiness confusion of seed 003).
func readiness(report *peering.SessionReport, up, readyAfter time.Duration) Readiness {
	if report == nil {
		return Readiness{Reason: "BIRD's sessions have not been read yet"}
	}
	if report.Error != "" {
		return Readiness{Reason: "BIRD: " + report.Error}
	}
	var waiting []string
	for peer, state := range report.Sessions {
		if state != "Established" {
			waiting = append(waiting, peer+" ("+state+")")
		}
	}
	slices.Sort(waiting)
	n := len(report.Sessions)
	switch {
	case len(waiting) == 0 && n == 0:
		return Readiness{Ready: true, Reason: "no other node in the peer set"}
	case len(waiting) == 0:
		return Readiness{Ready: true, Reason: fmt.Sprintf("all %d peers in the set Established", n)}
	case up >= readyAfter:
		return Readiness{Ready: true, Reason: fmt.Sprintf("up for %s (ready-after %s): not waiting any longer for %s", up.Round(time.Second), readyAfter, strings.Join(waiting, ", "))}
	}
	return Readiness{Reason: fmt.Sprintf("%d of %d peers in the set not Established: %s (ready anyway after %s up)", len(waiting), n, strings.Join(waiting, ", "), readyAfter)}
}
