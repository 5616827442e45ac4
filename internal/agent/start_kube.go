package agent

import (
	"context"

	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// birdStarting reports whether BIRD is not running or still in
// graceful-restart recovery: then the start rule applies.
func (a *Agent) birdStarting(ctx context.Context) bool {
	st, err := a.opts.Control.Status(ctx)
	return err != nil || st.GracefulRestart != nil
}

// startView turns the published set into the start rule's input: the
// controller publishes, per member, its Ready condition, the evidence
// that a NotReady member is alive (Alive) and that a Ready member is lost
// by the mesh (Lost), from the liveness verdicts (pkg/liveness), and the
// reason it keeps each (a frozen set); this node's own BIRD adds what it
// sees first-hand.
func (a *Agent) startView(ctx context.Context, doc *peering.PeerSet, peers []bird.Peer) []StartPeer {
	local := map[string]bool{}
	if protos, err := a.opts.Control.Protocols(ctx); err == nil {
		for _, s := range sessions(peers, protos, nil, a.clock.Now()) {
			local[s.Peer] = s.Established()
		}
	}
	return StartView(doc, peers, local)
}

// StartView is the start rule's input from the published set and the
// sessions this node's BIRD has Established (local, by peer name).
func StartView(doc *peering.PeerSet, peers []bird.Peer, local map[string]bool) []StartPeer {
	byName := make(map[string]peering.PublishedPeer, len(doc.Peers))
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
