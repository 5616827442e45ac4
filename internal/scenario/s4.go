package scenario

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"rebound/internal/agent"
	"rebound/internal/birdlab"
	"rebound/internal/birdproc"
	"rebound/pkg/peering/bird"
)

// S4 is the seed's BGP graceful-restart stall, on real BIRD daemons (no
// sandbox): in a full mesh in Calico's style, half the nodes die, then one
// of them, B, returns (bird -R: graceful-restart recovery). Without rebound
// B's configuration still lists every node, and B waits the whole
// `graceful restart wait` (240 s) for the dead peers before it announces
// and programs routes. With rebound, B's agent applies the health-aware
// peer set (the live nodes), which ends the wait. It is the code
// `rebound-bench s4` runs, with a timeline.

// S4Options tune scenario S4.
type S4Options struct {
	Bins birdproc.Binaries
	// Nodes in the mesh, at least 3; ceil(Nodes/2) die, node-1 (B) among
	// them. 0 means 5.
	Nodes int
	// Net is the lab's loopback /16 (birdlab.Options.Net); labs that run
	// at the same time need different values.
	Net int
	// Dir holds the lab's files; short (unix socket paths). Empty means a
	// temporary folder.
	Dir string
	// Rebound applies the health-aware peer set on B, as `rebound agent`
	// does.
	Rebound bool
	// GracefulRestartWait is BIRD's wait, seconds; 0 means 240 (BIRD's and
	// Calico's default).
	GracefulRestartWait int
	// Cap stops waiting for B's routes; 0 means the wait plus a minute.
	Cap time.Duration
}

// S4Result is what S4 found.
type S4Result struct {
	Nodes       int    `json:"nodes"`
	Dead        int    `json:"dead"`
	BirdVersion string `json:"birdVersion"`
	WaitSeconds int    `json:"gracefulRestartWaitSeconds"`
	// RestartedAt is when B's BIRD started (timeline time).
	RestartedAt time.Duration `json:"restartedAt"`
	// Recovered is true when every live node had B's route within the cap;
	// RecoveredAt says when.
	Recovered   bool          `json:"recovered"`
	RecoveredAt time.Duration `json:"recoveredAt"`
}

// RunS4 plays S4 on a lab of real BIRD daemons.
func RunS4(ctx context.Context, tl *Timeline, opts S4Options) (res S4Result, err error) {
	n := opts.Nodes
	if n == 0 {
		n = 5
	}
	if n < 3 || n > 32 {
		return res, fmt.Errorf("S4 needs 3 to 32 nodes, not %d", n)
	}
	wait := opts.GracefulRestartWait
	if wait == 0 {
		wait = bird.DefaultGracefulRestartWait
	}
	limit := opts.Cap
	if limit == 0 {
		limit = time.Duration(wait)*time.Second + time.Minute
	}
	res = S4Result{Nodes: n, Dead: (n + 1) / 2, BirdVersion: opts.Bins.Banner, WaitSeconds: wait}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rb-s4"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	}
	lab, err := birdlab.New(birdlab.Options{
		Bins: opts.Bins, Nodes: n, Net: opts.Net, Dir: dir,
		GracefulRestartTime: 10, GracefulRestartWait: wait, Include: true,
	})
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := lab.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	b := lab.Nodes[1]
	dead := lab.Nodes[1 : 1+res.Dead]
	live := append([]*birdlab.Node{lab.Nodes[0]}, lab.Nodes[1+res.Dead:]...)

	tl.Step("start BIRD on %d nodes (%s), full mesh with graceful restart (wait %d s)", n, opts.Bins.Banner, wait)
	if err := lab.StartAll(ctx); err != nil {
		return res, err
	}
	for _, node := range lab.Nodes {
		tl.Add("node", node.Name, "Ready")
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := watchSessions(watchCtx, tl, lab, b, live)
	defer func() { stopWatch(); <-watchDone }()

	err = birdlab.Poll(ctx, 500*time.Millisecond, 3*time.Minute, "the mesh converges", func() (bool, string) {
		for _, node := range lab.Nodes {
			if ok, missing, err := birdlab.Established(ctx, node, birdlab.Others(lab.Nodes, node)); !ok {
				return false, fmt.Sprintf("%s: no session with %s %v", node.Name, missing, err)
			}
		}
		return birdlab.RoutesAt(ctx, live, b)
	})
	if err != nil {
		return res, err
	}
	names := make([]string, len(dead))
	for i, d := range dead {
		names[i] = d.Name
	}
	tl.Step("kill BIRD on %s (SIGKILL)", strings.Join(names, ", "))
	for _, d := range dead {
		if err := lab.Kill(d); err != nil {
			return res, err
		}
		tl.Add("node", d.Name, "NotReady")
	}
	err = birdlab.Poll(ctx, 500*time.Millisecond, time.Minute, "the live nodes drop B's stale route", func() (bool, string) {
		for _, obs := range live {
			if ok, err := birdlab.HasRoute(ctx, obs, b.Route); ok || err != nil {
				return false, fmt.Sprintf("%s still has it (%v)", obs.Name, err)
			}
		}
		return true, ""
	})
	if err != nil {
		return res, err
	}

	// What B's agent does: apply the set the controller published (the
	// live nodes). BIRD 1.6 ends its recovery when a reload drops the dead
	// peers, so the agent may run beside BIRD; BIRD 2 does not, so there
	// the agent stages the set before BIRD starts (rebound agent --once).
	var set []bird.Peer
	for _, node := range live {
		set = append(set, node.Peer())
	}
	apply := func(want agent.Outcome) error {
		s, err := agent.NewSyncer(b.MeshPath, b.Client(), lab.MeshConfig(b, nil))
		if err != nil {
			return err
		}
		s.SetCheck(agent.ParseCheck(opts.Bins.Bird, b.Config))
		got, err := s.Sync(ctx, set)
		if got != want {
			return fmt.Errorf("agent sync: %s, want %s: %v", got, want, err)
		}
		return nil
	}
	stageFirst := opts.Rebound && opts.Bins.Version == bird.Bird2
	if stageFirst {
		tl.Step("rebound agent --once on %s: peers = the live nodes only", b.Name)
		if err := apply(agent.Staged); err != nil {
			return res, err
		}
	}
	tl.Step("%s returns: bird -R (graceful-restart recovery)", b.Name)
	start := time.Now()
	if err := lab.Start(ctx, b, true); err != nil {
		return res, err
	}
	res.RestartedAt = tl.Since()
	tl.Add("node", b.Name, "Ready")
	if opts.Rebound && !stageFirst {
		if err := apply(agent.Reloaded); err != nil {
			return res, err
		}
		tl.Step("rebound agent on %s applied the peer set (the live nodes) and reloaded BIRD", b.Name)
	}
	for time.Since(start) < limit {
		if ok, _ := birdlab.RoutesAt(ctx, live, b); ok {
			res.Recovered, res.RecoveredAt = true, tl.Since()
			tl.Step("every live node has %s's route, %.1fs after it returned", b.Name, (res.RecoveredAt - res.RestartedAt).Seconds())
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	tl.Step("after %s: the live nodes still lack %s's route", limit, b.Name)
	return res, nil
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
