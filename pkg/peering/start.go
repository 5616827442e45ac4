package peering

import (
	"slices"

	"rebound/pkg/peering/bird"
)

// The start rule: a starting node has nothing to protect.
//
// The published set keeps a NotReady node for its prune grace period so
// that established sessions with a node that may still forward do not
// churn. A node whose BIRD is (re)starting has no sessions to protect:
// every peer it renders for BIRD's start is one BIRD waits for (graceful
// restart recovery, up to `graceful restart wait`, 240 s) before it
// announces and programs any route. So for BIRD's start (--once, and every
// render while BIRD is not running or still in graceful-restart recovery)
// the agent renders only the peers with evidence that they can answer now,
// and the members of a frozen set, of which nobody can tell.
// Once BIRD's recovery is over, the whole published set is rendered again,
// so a peer left out at start joins seconds later, as any peer that
// becomes Ready does. docs/peering.md, "Starting nodes", proves that this
// cannot blackhole a live peer.

// StartPeer is what the start rule knows about one peer of the set.
type StartPeer struct {
	Peer bird.Peer
	// Ready is the peer's Ready condition in the API.
	Ready bool
	// Alive is the published set's fresh evidence that the peer's BGP
	// works now: a live agent's session with it Established since after
	// its NotReady transition, or BFD up.
	Alive bool
	// Unreachable is fresh evidence that a Ready peer is not: every working
	// member of the mesh (Ready, BIRD out of recovery, at least one session
	// Established) reports its session down (liveness.Assessment.Lost, published
	// by the controller as PublishedPeer.Lost). It is what the API has not
	// caught up with yet: a node is NotReady only after
	// node-monitor-grace-period (40 s), BFD notices in a second.
	Unreachable bool
	// LocalEstablished is this node's own BIRD having the session
	// Established now: first-hand and current, it always counts.
	LocalEstablished bool
	// Frozen: the published set is frozen (a full disruption, or too many
	// leaving without a quorum confirming them dead). Nobody can tell
	// whether its NotReady members forward, so BIRD starts with them:
	// leaving it out would end graceful-restart recovery without it and
	// flush the routes through it, worse than upstream's wait.
	Frozen bool
}

// StartPeers is the start rule: the peers BIRD should start with. A peer
// is kept when
//
//	LocalEstablished || Alive || Frozen || (Ready && !Unreachable)
//
// and left out otherwise: NotReady peers without evidence of life in a set
// that follows node health (in their grace period, or held by the leave
// budget), and Ready peers every working mesh member has lost. The result is sorted by
// address, like the set the agent renders.
func StartPeers(peers []StartPeer) []bird.Peer {
	out := make([]bird.Peer, 0, len(peers))
	for _, p := range peers {
		if StartKeeps(p) {
			out = append(out, p.Peer)
		}
	}
	slices.SortFunc(out, func(x, y bird.Peer) int { return x.Address.Compare(y.Address) })
	return out
}

// StartKeeps is the start rule for one peer.
func StartKeeps(p StartPeer) bool {
	return p.LocalEstablished || p.Alive || p.Frozen || (p.Ready && !p.Unreachable)
}

// StartView is the start rule's input from the published set and the
// sessions this node's BIRD has Established (local, by peer name).
func StartView(doc *PeerSet, peers []bird.Peer, local map[string]bool) []StartPeer {
	byName := make(map[string]PublishedPeer, len(doc.Peers))
	for _, p := range doc.Peers {
		byName[p.Name] = p
	}
	out := make([]StartPeer, 0, len(peers))
	for _, p := range peers {
		m := byName[p.Name]
		out = append(out, StartPeer{Peer: p, Ready: m.Ready, Alive: m.Alive != "", Unreachable: m.Lost != "", LocalEstablished: local[p.Name], Frozen: doc.Frozen})
	}
	return out
}
