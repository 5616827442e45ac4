package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/birdproc"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// S4 is the seed's BGP graceful-restart stall, on real BIRD daemons: in a
// full mesh in Calico's style, half the nodes die, then one of them, B,
// returns (bird -R: graceful-restart recovery). Without rebound B's
// configuration still lists every node, and B waits the whole `graceful
// restart wait` (240 s) for the dead peers before it announces and
// programs routes. With rebound, B's agent renders, for BIRD's start, the
// peers the start rule keeps (peering.StartPeers: the live ones), which
// ends the wait as soon as they have converged.
//
// RunS4 is the one runner of S4: the demo, `rebound-bench s4` and the e2e
// tests call it. RunS4OnSandbox (s4_sandbox.go) adds the sandbox Nodes, the
// real peering controller and agents through S4Hooks, for the e2e tests
// and the demo; without a Returning hook, a lane with Rebound stages B's
// start set from a model of the API (stageStartSet), for the bench's
// matrix of lab sizes and return times.

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
	// NetNS, when set, runs the lab in this network namespace (root) and
	// measures B's kernel table instead of its BIRD table (unless
	// ExternalConfig is set).
	NetNS string
	// NodeName names node i (birdlab.Options.NodeName).
	NodeName func(i int) string
	// Rebound: B starts with rebound's start set (see Hooks.Returning).
	Rebound bool
	// ReturnAfter is when B's BIRD starts, after the failure; 0 means as
	// soon as every live node dropped B's route.
	ReturnAfter time.Duration
	// GracefulRestartWait is BIRD's wait, seconds; 0 means 240 (BIRD's and
	// Calico's default). GracefulRestartTime is the per-peer restart
	// time, seconds; 0 means 10, so that the live nodes drop the dead
	// nodes' stale routes before B returns (the seed's nodes stayed down
	// for minutes).
	GracefulRestartWait int
	GracefulRestartTime int
	// BFD runs BFD in the lab (BIRD 2 only, see birdlab.Options.BFD).
	BFD *bird.BFD
	// Port, ExternalConfig and ProtocolNames are birdlab.Options': a
	// lab whose BIRDs something else configures (Calico's confd) sets
	// them, and the Starting hook writes the configurations. Such a lab
	// has no kernel node of its own: S4 measures B's BIRD table.
	Port           uint16
	ExternalConfig func(n *birdlab.Node) string
	ProtocolNames  func(addr netip.Addr) []string
	// Freeze makes the dead nodes freeze (SIGSTOP, a power loss: their
	// peers notice by BFD or hold timer) instead of dying with SIGKILL
	// (their TCP sessions close at once). They are killed before B returns.
	Freeze bool
	// NodeMonitorGrace and PruneGrace model the API for the start set when
	// no hook publishes one: a dead node turns NotReady NodeMonitorGrace
	// after it died (kube-controller-manager's default 40 s) and leaves
	// the set PruneGrace later (the controller's default 40 s).
	NodeMonitorGrace time.Duration
	PruneGrace       time.Duration
	// Cap stops waiting for B's routes; 0 means the wait plus a minute.
	Cap time.Duration
	// Poll is the measuring interval; 0 means 200 ms (1 s after the first
	// 20 s, to spare a loaded machine while BIRD waits).
	Poll  time.Duration
	Hooks S4Hooks
}

// S4Hooks let a caller add the parts RunS4 does not run itself (a sandbox,
// the controller, agents) and checks. Each may be nil.
type S4Hooks struct {
	// Starting runs once the lab exists, before any BIRD starts.
	Starting func(ctx context.Context, lab *birdlab.Lab) error
	// Converged runs once every BIRD runs and the mesh has converged.
	Converged func(ctx context.Context, lab *birdlab.Lab) error
	// Killed runs right after the dead nodes' BIRDs died (or froze).
	Killed func(ctx context.Context, lab *birdlab.Lab, dead []*birdlab.Node) error
	// Returning runs just before B's BIRD starts. With Rebound and no
	// Returning hook, RunS4 stages B's start set itself, as
	// `rebound agent --once` does before BIRD starts.
	Returning func(ctx context.Context, lab *birdlab.Lab, b *birdlab.Node) error
	// Returned runs right after B's BIRD started.
	Returned func(ctx context.Context, lab *birdlab.Lab, b *birdlab.Node) error
	// Measured runs once B's routes are measured, before the lab stops.
	Measured func(ctx context.Context, lab *birdlab.Lab, res S4Result) error
}

// S4Result is what S4 found.
type S4Result struct {
	Nodes       int    `json:"nodes"`
	Dead        int    `json:"dead"`
	BirdVersion string `json:"birdVersion"`
	WaitSeconds int    `json:"gracefulRestartWaitSeconds"`
	// ReturnedAfter is how long after the failure B's BIRD started.
	ReturnedAfter time.Duration `json:"returnedAfter"`
	// RestartedAt is when B's BIRD started (timeline time).
	RestartedAt time.Duration `json:"restartedAt"`
	// StartPeers are the peers B's BIRD started with.
	StartPeers []string `json:"startPeers"`
	// Recovered is true when, within the cap, every live node had B's
	// route and B had every live node's route; RecoveredAt says when
	// (timeline time), and the two delays from B's start are below.
	Recovered   bool          `json:"recovered"`
	RecoveredAt time.Duration `json:"recoveredAt"`
	// RouteOfB: every live node has B's route; RoutesOnB: B has every
	// live node's route (B's kernel table when KernelTable). Negative
	// when not within the cap.
	RouteOfB    time.Duration `json:"routeOfB"`
	RoutesOnB   time.Duration `json:"routesOnB"`
	KernelTable bool          `json:"kernelTable"`
	// SessionsDown (Freeze only) is how long after the failure the last
	// session of a live node with a dead one left Established, by BIRD's
	// own state-change times: BFD's detection, else the hold timer.
	SessionsDown time.Duration `json:"sessionsDown,omitempty"`
	// Cap is how long B's routes were waited for.
	Cap time.Duration `json:"cap"`
}

// Recovery is the later of RouteOfB and RoutesOnB: when traffic flows
// both ways again, measured from B's BIRD start.
func (r S4Result) Recovery() time.Duration { return max(r.RouteOfB, r.RoutesOnB) }

// RunS4 plays S4 on a lab of real BIRD daemons.
func RunS4(ctx context.Context, tl *Timeline, opts S4Options) (res S4Result, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return res, err
	}
	n := opts.Nodes
	res = S4Result{Nodes: n, Dead: (n + 1) / 2, BirdVersion: opts.Bins.Banner, WaitSeconds: opts.GracefulRestartWait,
		RouteOfB: -1, RoutesOnB: -1, Cap: opts.Cap}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rb-s4"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	}
	lab, err := birdlab.New(birdlab.Options{
		Bins: opts.Bins, Nodes: n, Net: opts.Net, Dir: dir, NetNS: opts.NetNS, KernelNode: 1, NodeName: opts.NodeName,
		GracefulRestartTime: opts.GracefulRestartTime, GracefulRestartWait: opts.GracefulRestartWait, Include: true, BFD: opts.BFD,
		Port: opts.Port, ExternalConfig: opts.ExternalConfig, ProtocolNames: opts.ProtocolNames,
	})
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := lab.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	res.KernelTable = lab.Nodes[1].Kernel
	r := &s4Run{opts: opts, tl: tl, lab: lab, b: lab.Nodes[1], dead: lab.Nodes[1 : 1+res.Dead]}
	r.live = append([]*birdlab.Node{lab.Nodes[0]}, lab.Nodes[1+res.Dead:]...)
	defer func() {
		if r.stopWatch != nil {
			r.stopWatch()
		}
	}()

	if err := r.converge(ctx); err != nil {
		return res, err
	}
	if err := r.fail(ctx, &res); err != nil {
		return res, err
	}
	if err := r.waitReturn(ctx); err != nil {
		return res, err
	}
	res.ReturnedAfter = time.Since(r.failedAt)
	if err := r.returnB(ctx); err != nil {
		return res, err
	}
	res.RestartedAt = tl.Since()
	res.StartPeers = r.startPeers
	if err := r.measure(ctx, &res); err != nil {
		return res, err
	}
	if h := opts.Hooks.Measured; h != nil {
		return res, h(ctx, lab, res)
	}
	return res, nil
}

func (o S4Options) withDefaults() (S4Options, error) {
	if o.Nodes == 0 {
		o.Nodes = 5
	}
	if o.Nodes < 3 || o.Nodes > 32 {
		return o, fmt.Errorf("S4 needs 3 to 32 nodes, not %d", o.Nodes)
	}
	if o.GracefulRestartWait == 0 {
		o.GracefulRestartWait = bird.DefaultGracefulRestartWait
	}
	if o.GracefulRestartTime == 0 {
		o.GracefulRestartTime = 10
	}
	if o.Cap == 0 {
		o.Cap = time.Duration(o.GracefulRestartWait)*time.Second + time.Minute
	}
	if o.NodeMonitorGrace == 0 {
		o.NodeMonitorGrace = 40 * time.Second
	}
	if o.PruneGrace == 0 {
		o.PruneGrace = peering.DefaultPruneGracePeriod
	}
	if o.Poll == 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.ReturnAfter < 0 {
		return o, fmt.Errorf("S4 return after %v: must not be negative", o.ReturnAfter)
	}
	return o, nil
}

// s4Run is one play of S4.
type s4Run struct {
	opts       S4Options
	tl         *Timeline
	lab        *birdlab.Lab
	b          *birdlab.Node
	dead, live []*birdlab.Node
	failedAt   time.Time
	startPeers []string
	stopWatch  func()
}

func (r *s4Run) converge(ctx context.Context) error {
	if h := r.opts.Hooks.Starting; h != nil {
		if err := h(ctx, r.lab); err != nil {
			return err
		}
	}
	r.tl.Step("start BIRD on %d nodes (%s), full mesh with graceful restart (wait %d s)", len(r.lab.Nodes), r.opts.Bins.Banner, r.opts.GracefulRestartWait)
	if err := r.lab.StartAll(ctx); err != nil {
		return err
	}
	for _, node := range r.lab.Nodes {
		r.tl.Add("node", node.Name, "Ready")
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	done := watchSessions(watchCtx, r.tl, r.lab, r.b, r.live)
	r.stopWatch = func() { stopWatch(); <-done }
	err := birdlab.Poll(ctx, 500*time.Millisecond, 3*time.Minute, "the mesh converges", func() (bool, string) {
		for _, node := range r.lab.Nodes {
			if ok, missing, err := birdlab.Established(ctx, node, birdlab.Others(r.lab.Nodes, node)); !ok {
				return false, fmt.Sprintf("%s: no session with %s %v", node.Name, missing, err)
			}
		}
		if ok, why := birdlab.RoutesAt(ctx, r.live, r.b); !ok {
			return false, why
		}
		return r.bHasLiveRoutes(ctx)
	})
	if err != nil {
		return err
	}
	if h := r.opts.Hooks.Converged; h != nil {
		return h(ctx, r.lab)
	}
	return nil
}

// fail kills (or freezes) the dead nodes and waits until the live nodes
// dropped B's route.
func (r *s4Run) fail(ctx context.Context, res *S4Result) error {
	names := make([]string, len(r.dead))
	for i, d := range r.dead {
		names[i] = d.Name
	}
	how := "kill BIRD on %s (SIGKILL)"
	if r.opts.Freeze {
		how = "freeze BIRD on %s (SIGSTOP: power loss)"
	}
	r.tl.Step(how, strings.Join(names, ", "))
	r.failedAt = time.Now()
	for _, d := range r.dead {
		stop := r.lab.Kill
		if r.opts.Freeze {
			stop = r.lab.Freeze
		}
		if err := stop(d); err != nil {
			return err
		}
		r.tl.Add("node", d.Name, "dead")
	}
	if r.opts.Freeze {
		// Before any hook: an agent may remove the dead peers' protocols.
		var err error
		if res.SessionsDown, err = r.sessionsDown(ctx); err != nil {
			return err
		}
	}
	if h := r.opts.Hooks.Killed; h != nil {
		if err := h(ctx, r.lab, r.dead); err != nil {
			return err
		}
	}
	return r.waitStaleRouteGone(ctx)
}

// waitStaleRouteGone waits until every live node dropped B's route.
func (r *s4Run) waitStaleRouteGone(ctx context.Context) error {
	return birdlab.Poll(ctx, 200*time.Millisecond, time.Minute+time.Duration(r.opts.GracefulRestartTime)*time.Second, "the live nodes drop B's stale route", func() (bool, string) {
		for _, obs := range r.live {
			if ok, err := birdlab.HasRoute(ctx, obs, r.b.Route); ok || err != nil {
				return false, fmt.Sprintf("%s still has it (%v)", obs.Name, err)
			}
		}
		return true, ""
	})
}

// sessionsDown waits until no live node has a session Established with a
// dead one and returns when the last one changed, after the failure, by
// BIRD's own timestamps.
func (r *s4Run) sessionsDown(ctx context.Context) (time.Duration, error) {
	var last time.Time
	err := birdlab.Poll(ctx, 100*time.Millisecond, time.Duration(bird.DefaultHoldTime+30)*time.Second, "the live nodes lose the dead ones", func() (bool, string) {
		last = time.Time{}
		for _, obs := range r.live {
			protos, err := obs.Client().Protocols(ctx)
			if err != nil {
				return false, err.Error()
			}
			st, err := obs.Client().Status(ctx)
			if err != nil {
				return false, err.Error()
			}
			readAt := time.Now()
			by := map[string]bird.Protocol{}
			for _, p := range protos {
				by[p.Name] = p
			}
			for _, d := range r.dead {
				p, ok := by[bird.ProtocolName(d.Address)]
				if !ok {
					return false, fmt.Sprintf("%s has no protocol for %s: it must still have it to measure", obs.Name, d.Name)
				}
				if p.Established() {
					return false, fmt.Sprintf("%s still has %s Established", obs.Name, d.Name)
				}
				t, err := bird.SinceTime(p.Since, st.ServerTime, readAt)
				if err != nil {
					return false, err.Error()
				}
				last = maxTime(last, t)
			}
		}
		return true, ""
	})
	if err != nil {
		return 0, err
	}
	down := last.Sub(r.failedAt)
	r.tl.Add("bgp", "live nodes", "every session with a dead node down %.1fs after the failure", down.Seconds())
	return down, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitReturn waits until ReturnAfter has passed since the failure.
func (r *s4Run) waitReturn(ctx context.Context) error {
	if r.opts.ReturnAfter == 0 {
		return nil
	}
	wait := time.Until(r.failedAt.Add(r.opts.ReturnAfter))
	if wait < 0 {
		return fmt.Errorf("S4: the live nodes dropped B's route only %v after the failure, later than the return at %v; use a shorter graceful restart time", time.Since(r.failedAt).Round(time.Second), r.opts.ReturnAfter)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// returnB starts B's BIRD in graceful-restart recovery, with rebound's
// start set staged first when asked.
func (r *s4Run) returnB(ctx context.Context) error {
	if r.opts.Freeze {
		for _, d := range r.dead {
			if d != r.b {
				continue
			}
			if err := r.lab.Kill(d); err != nil { // a frozen B must be gone before it restarts
				return err
			}
		}
	}
	if h := r.opts.Hooks.Returning; h != nil {
		if err := h(ctx, r.lab, r.b); err != nil {
			return err
		}
	} else if r.opts.Rebound {
		if err := r.stageStartSet(ctx); err != nil {
			return err
		}
	}
	r.tl.Step("%s returns %v after the failure: bird -R (graceful-restart recovery)", r.b.Name, time.Since(r.failedAt).Round(time.Second))
	if err := r.lab.Start(ctx, r.b, true); err != nil {
		return err
	}
	r.tl.Add("node", r.b.Name, "BIRD started")
	if h := r.opts.Hooks.Returned; h != nil {
		return h(ctx, r.lab, r.b)
	}
	return nil
}

// measure polls from B's start until every live node has B's route and B
// has every live node's route, or the cap.
func (r *s4Run) measure(ctx context.Context, res *S4Result) error {
	d := r.b.Daemon()
	if d == nil {
		return errors.New("S4: B's BIRD is not running")
	}
	start := d.Started()
	for time.Since(start) < r.opts.Cap {
		if res.RouteOfB < 0 {
			if ok, _ := birdlab.RoutesAt(ctx, r.live, r.b); ok {
				res.RouteOfB = time.Since(start)
				r.tl.Add("routes", r.b.Name+"'s route", "on every live node, %.1fs after its BIRD started", res.RouteOfB.Seconds())
			}
		}
		if res.RoutesOnB < 0 {
			if ok, _ := r.bHasLiveRoutes(ctx); ok {
				res.RoutesOnB = time.Since(start)
				r.tl.Add("routes", "on "+r.b.Name, "every live node's route, %.1fs after its BIRD started", res.RoutesOnB.Seconds())
			}
		}
		if res.RouteOfB >= 0 && res.RoutesOnB >= 0 {
			res.Recovered, res.RecoveredAt = true, res.RestartedAt+res.Recovery()
			r.tl.Step("traffic flows both ways through %s again, %.1fs after its BIRD started", r.b.Name, res.Recovery().Seconds())
			return nil
		}
		interval := r.opts.Poll
		if time.Since(start) > 20*time.Second {
			interval = max(interval, time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
	r.tl.Step("after %s: %s and the live nodes still lack each other's routes", r.opts.Cap, r.b.Name)
	return nil
}

// bHasLiveRoutes: B's kernel table (with a namespace) or BIRD table has
// every live node's route.
func (r *s4Run) bHasLiveRoutes(ctx context.Context) (bool, string) {
	for _, n := range r.live {
		var ok bool
		var err error
		if r.b.Kernel {
			ok, err = r.lab.KernelHasRoute(n.Route)
		} else {
			ok, err = birdlab.HasRoute(ctx, r.b, n.Route)
		}
		if !ok {
			return false, fmt.Sprintf("%s lacks %s's %s (%v)", r.b.Name, n.Name, n.Route, err)
		}
	}
	return true, ""
}
