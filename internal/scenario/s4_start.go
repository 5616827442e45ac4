package scenario

import (
	"context"
	"fmt"
	"time"

	"rebound/internal/agent"
	"rebound/internal/birdlab"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// stageStartSet is what B's `rebound agent --once` does before BIRD
// starts, with the API modeled from the lab: the controller's set
// (peering.Plan: a dead node NotReady NodeMonitorGrace after it died,
// left out PruneGrace later), the live nodes' session reports (read from
// their BIRDs, as their agents report them), then the start rule
// (agent.StartPeers) and the agent's Syncer, checked by `bird -p`.
// The e2e tests run the real controller and agents instead (S4Hooks).
func (r *s4Run) stageStartSet(ctx context.Context) error {
	now := time.Now()
	notReadyAt := r.failedAt.Add(r.opts.NodeMonitorGrace)
	isDead := map[*birdlab.Node]bool{}
	for _, d := range r.dead {
		isDead[d] = true
	}
	var reporters []agent.Reporter
	sessions := map[string]map[string]bool{}
	for _, n := range r.live {
		protos, err := n.Client().Protocols(ctx)
		if err != nil {
			return fmt.Errorf("read %s's sessions: %w", n.Name, err)
		}
		byProto := map[string]bird.Protocol{}
		for _, p := range protos {
			byProto[p.Name] = p
		}
		s := map[string]bool{}
		for _, peer := range birdlab.Others(r.lab.Nodes, n) {
			if p, ok := byProto[bird.ProtocolName(peer.Address)]; ok {
				s[peer.Name] = p.Established()
			}
		}
		sessions[n.Name] = s
		reporters = append(reporters, agent.Reporter{Name: n.Name, Working: true, Sessions: s})
	}
	var nodes []peering.Node
	for _, n := range r.lab.Nodes {
		pn := peering.Node{Name: n.Name, Address: n.Address, Ready: true, Sessions: sessions[n.Name]}
		if isDead[n] && n != r.b && !now.Before(notReadyAt) {
			pn.Ready, pn.LastTransition = false, notReadyAt
		}
		nodes = append(nodes, pn)
	}
	set := peering.Plan(peering.Input{Nodes: nodes, Config: peering.Config{PruneGracePeriod: r.opts.PruneGrace}}, now)
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n.Name] = n.Ready
	}
	var view []agent.StartPeer
	for _, p := range set.Peers {
		node := r.node(p.Name)
		if node == r.b {
			continue
		}
		alive := false
		for _, rep := range reporters {
			alive = alive || (!ready[p.Name] && rep.Sessions[p.Name])
		}
		view = append(view, agent.StartPeer{
			Peer: node.Peer(), Ready: ready[p.Name], Alive: alive,
			Unreachable: agent.LostByMesh(p.Name, reporters),
		})
	}
	start := agent.StartPeers(view)
	for _, p := range start {
		r.startPeers = append(r.startPeers, p.Name)
	}
	r.tl.Step("rebound agent --once on %s: the set has %d peers, BIRD starts with %d (the start rule keeps %v)",
		r.b.Name, len(view), len(start), r.startPeers)
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

func (r *s4Run) node(name string) *birdlab.Node {
	for _, n := range r.lab.Nodes {
		if n.Name == name {
			return n
		}
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
