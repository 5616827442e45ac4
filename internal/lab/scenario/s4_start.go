package scenario

import (
	"context"
	"fmt"
	"time"

	"rebound/internal/agent"
	"rebound/internal/lab/birdlab"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// stageStartSet is what B's `rebound agent --once` does before BIRD
// starts, with the API modeled from the lab: the live nodes' reports
// (agent.ReadReport on their BIRDs, as their agents write them), the
// controller's set (peering.Plan: a dead node turns NotReady
// NodeMonitorGrace after it died and leaves PruneGrace later; the Lost
// and Alive evidence from the reports), then the start rule
// (peering.StartView, peering.StartPeers) and the agent's Syncer, checked by
// `bird -p`. The e2e tests run the real controller and agents instead
// (S4Hooks).
func (r *s4Run) stageStartSet(ctx context.Context) error {
	now := time.Now()
	notReadyAt := r.failedAt.Add(r.opts.NodeMonitorGrace)
	isDead := map[*birdlab.Node]bool{}
	for _, d := range r.dead {
		isDead[d] = true
	}
	var before, nodes []peering.Node
	for _, n := range r.lab.Nodes {
		pn := peering.Node{Name: n.Name, Address: n.Address, Port: n.Port, Ready: true}
		before = append(before, pn)
		if isDead[n] && n != r.b && !now.Before(notReadyAt) {
			pn.Ready, pn.LastTransition = false, notReadyAt
		}
		nodes = append(nodes, pn)
	}
	// The set the live agents last applied: everybody, before the failure.
	applied := peering.Plan(peering.Input{Nodes: before}, r.failedAt).PeerSet(1, r.failedAt)
	var reports []peering.Report
	for _, n := range r.live {
		rep, _, err := agent.ReadReport(ctx, n.Client(), n.Name, r.lab.Peers(n), &applied, now)
		if err != nil {
			return fmt.Errorf("read %s's sessions: %w", n.Name, err)
		}
		reports = append(reports, rep)
	}
	res := peering.Plan(peering.Input{Nodes: nodes, Reports: reports, Config: peering.Config{PruneGracePeriod: r.opts.PruneGrace}}, now)
	doc := res.PeerSet(2, now)
	var set []bird.Peer
	for _, p := range doc.Peers {
		if p.Name != r.b.Name {
			set = append(set, bird.Peer{Name: p.Name, Address: p.Address, Port: p.Port})
		}
	}
	start := peering.StartPeers(peering.StartView(&doc, set, nil))
	for _, p := range start {
		r.startPeers = append(r.startPeers, p.Name)
	}
	r.tl.Step("rebound agent --once on %s: the set has %d peers, BIRD starts with %d (the start rule keeps %v)",
		r.b.Name, len(set), len(start), r.startPeers)
	s, err := agent.NewSyncer(r.b.MeshPath, r.b.Client(), r.lab.MeshConfig(r.b, nil))
	if err != nil {
		return err
	}
	s.SetCheck(agent.ParseCheck(r.opts.Bins.Bird, r.b.Config))
	if got, err := s.Sync(ctx, start); got != agent.Staged {
		return fmt.Errorf("agent --once: %s, want %s: %v", got, agent.Staged, err)
	}
	return nil
}

// watchSessions adds a "bgp" event whenever a session of b with a peer
// changes state, and a "routes" event whenever the number of live nodes
// that have b's route changes.
func watchSessions(ctx context.Context, tl *Timeline, lab *birdlab.Lab, b *birdlab.Node, live []*birdlab.Node) <-chan struct{} {
	byProto := map[string]string{}
	for _, n := range lab.Nodes {
		if n != b {
			byProto[bird.ProtocolName(n.Address)] = n.Name
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]string{}
		lastRoutes := -1
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			cur := map[string]string{}
			if b.Daemon() == nil {
				for _, peer := range byProto {
					cur[peer] = "down (BIRD not running)"
				}
			} else if protos, err := b.Client().Protocols(ctx); err == nil {
				for _, p := range protos {
					peer, ok := byProto[p.Name]
					if !ok || p.Proto != "BGP" {
						continue
					}
					st := p.BGPState()
					if st == "" {
						st = p.State
					}
					if p.State == "wait" {
						st += " (graceful-restart wait)"
					}
					cur[peer] = st
				}
				for _, peer := range byProto {
					if _, ok := cur[peer]; !ok {
						cur[peer] = "removed from the peer set"
					}
				}
			} else {
				cur = last // the socket may not be up yet
			}
			for _, peer := range sortedKeys(cur) {
				if last[peer] != cur[peer] {
					tl.Add("bgp", b.Name+" ↔ "+peer, "%s", cur[peer])
				}
			}
			last = cur
			have := 0
			for _, obs := range live {
				if ok, _ := birdlab.HasRoute(ctx, obs, b.Route); ok {
					have++
				}
			}
			if have != lastRoutes {
				tl.Add("routes", b.Name+"'s route", "%d/%d live nodes have it", have, len(live))
				lastRoutes = have
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}
