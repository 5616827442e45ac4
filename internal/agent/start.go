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
func (a *Agent) startView(ctx context.Context, doc *peering.PeerSet, peers []bird.Peer) []peering.StartPeer {
	local := map[string]bool{}
	if protos, err := a.opts.Control.Protocols(ctx); err == nil {
		for _, s := range sessions(peers, protos, nil, a.clock.Now()) {
			local[s.Peer] = s.Established()
		}
	}
	return peering.StartView(doc, peers, local)
}
