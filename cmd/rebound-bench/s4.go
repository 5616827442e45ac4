package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"rebound/internal/agent"
	"rebound/internal/birdlab"
	"rebound/internal/birdproc"
	"rebound/pkg/peering/bird"
)

// s4Result is one run: a lab of n nodes, dead of them killed, node B
// (index 1, one of the dead) restarted with -R.
type s4Result struct {
	nodes, dead int
	rebound     bool
	// birdTable: every live node has B's /26; kernel: B's kernel table has
	// every live node's /26. Negative: not within the cap.
	birdTable, kernel time.Duration
	hasKernel         bool
	err               error
}

func runS4(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("s4", flag.ContinueOnError)
	sizesFlag := fs.String("sizes", "3,10,30", "cluster sizes; half of each (rounded up) dies, one of those returns")
	version := fs.String("bird", "1.6", "BIRD version: 1.6 or 2")
	limit := fs.Duration("cap", 300*time.Second, "give up waiting for routes after this long (BIRD's wait is 240 s)")
	wait := fs.Int("graceful-restart-wait", bird.DefaultGracefulRestartWait, "BIRD's `graceful restart wait`, seconds (240 is BIRD's and Calico's default)")
	netns := fs.Bool("netns", os.Geteuid() == 0, "run each lab in its own network namespace and measure the returning node's kernel table (needs root)")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: rebound-bench s4 [flags]

For each size N, two labs of N BIRD daemons run at the same time (all sizes
too), on loopback addresses (127.x.y.z, free ports, never 179), each node
announcing a /26 from 198.18.0.0/15 (the benchmarking range), in Calico's
style: full mesh, graceful restart, a per-peer restart time of 10 s (so the
live nodes drop the dead nodes' stale routes before B returns).

ceil(N/2) nodes are killed (SIGKILL), B among them; once the live nodes
dropped B's routes, B's BIRD restarts in graceful-restart recovery (bird -R).
  without rebound: B's configuration still lists every node;
  with rebound:    B's agent (its Syncer, the code rebound agent runs) applies
                   the peer set without the dead nodes: right after BIRD
                   starts with BIRD 1.6 (a reload ends the recovery), just
                   before with BIRD 2 (a reload does not, in BIRD 2.0.12).
Measured from B's start: every live node has B's /26 (BIRD table), and B's
kernel table has every live node's /26 (with -netns).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 3 || n > 32 {
			return fmt.Errorf("-sizes %q: want sizes between 3 and 32", *sizesFlag)
		}
		sizes = append(sizes, n)
	}
	if len(sizes) > 15 {
		return errors.New("-sizes: at most 15 sizes")
	}
	bins, err := birdproc.Find(bird.Version(*version))
	if err != nil {
		return fmt.Errorf("%w: %s", err, birdproc.InstallHint)
	}
	fmt.Printf("S4: a BGP node returns (bird -R) while half the cluster is dead. %s, graceful restart wait %d s, give-up cap %s.\n",
		bins.Banner, *wait, *limit)
	if !*netns {
		fmt.Println("No network namespaces (not root, or -netns=false): BIRD tables only, no kernel table.")
	}
	fmt.Printf("Running %d labs at once; this takes about the wait plus a minute...\n\n", 2*len(sizes))

	results := make([]s4Result, 2*len(sizes))
	var wg sync.WaitGroup
	for i, n := range sizes {
		for j, rebound := range []bool{false, true} {
			k := 2*i + j
			wg.Go(func() {
				results[k] = s4Run(ctx, bins, n, rebound, k+1, *wait, *limit, *netns)
			})
		}
	}
	wg.Wait()

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tdead\twithout rebound: BIRD table\tkernel\twith rebound: BIRD table\tkernel\t")
	var errs []error
	for i, n := range sizes {
		wo, w := results[2*i], results[2*i+1]
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t\n", n, wo.dead,
			cell(wo, wo.birdTable, *limit), kernelCell(wo, *limit), cell(w, w.birdTable, *limit), kernelCell(w, *limit))
		for _, r := range []s4Result{wo, w} {
			if r.err != nil {
				errs = append(errs, fmt.Errorf("%d nodes, rebound=%v: %w", n, r.rebound, r.err))
			}
		}
	}
	tw.Flush()
	fmt.Println()
	for _, r := range results {
		if r.err != nil {
			continue
		}
		mode := "without"
		if r.rebound {
			mode = "with"
		}
		if r.birdTable >= 0 {
			fmt.Printf("METRIC s4_bench_%d_nodes_route_restore_%s_rebound=%.1f s\n", r.nodes, mode, r.birdTable.Seconds())
		}
		if r.hasKernel && r.kernel >= 0 {
			fmt.Printf("METRIC s4_bench_%d_nodes_kernel_restore_%s_rebound=%.1f s\n", r.nodes, mode, r.kernel.Seconds())
		}
	}
	return errors.Join(errs...)
}

func cell(r s4Result, d, limit time.Duration) string {
	switch {
	case r.err != nil:
		return "error"
	case d < 0:
		return ">= " + limit.String()
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func kernelCell(r s4Result, limit time.Duration) string {
	if !r.hasKernel {
		return "-"
	}
	return cell(r, r.kernel, limit)
}

func s4Run(ctx context.Context, bins birdproc.Binaries, n int, rebound bool, net, wait int, limit time.Duration, netns bool) (res s4Result) {
	res = s4Result{nodes: n, dead: (n + 1) / 2, rebound: rebound, birdTable: -1, kernel: -1, hasKernel: netns}
	dir, err := os.MkdirTemp("", "rb-bench")
	if err != nil {
		res.err = err
		return res
	}
	defer os.RemoveAll(dir)
	opts := birdlab.Options{
		Bins: bins, Nodes: n, Net: net, Dir: dir,
		GracefulRestartTime: 10, GracefulRestartWait: wait,
		Include: true, KernelNode: 1,
	}
	if netns {
		opts.NetNS = fmt.Sprintf("rb-bench-%d-%d", net, os.Getpid())
	}
	lab, err := birdlab.New(opts)
	if err != nil {
		res.err = err
		return res
	}
	defer func() {
		if err := lab.Close(); err != nil && res.err == nil {
			res.err = err
		}
	}()
	if err := lab.StartAll(ctx); err != nil {
		res.err = err
		return res
	}
	b := lab.Nodes[1]
	dead := lab.Nodes[1 : 1+res.dead]
	live := append([]*birdlab.Node{lab.Nodes[0]}, lab.Nodes[1+res.dead:]...)

	// Converged: every node has every session, the live nodes have B's
	// route and B's kernel has theirs.
	err = birdlab.Poll(ctx, 500*time.Millisecond, 3*time.Minute, "the mesh converges", func() (bool, string) {
		for _, node := range lab.Nodes {
			if ok, missing, err := birdlab.Established(ctx, node, birdlab.Others(lab.Nodes, node)); !ok {
				return false, fmt.Sprintf("%s: no session with %s %v", node.Name, missing, err)
			}
		}
		return allHave(ctx, lab, live, b, netns)
	})
	if err != nil {
		res.err = err
		return res
	}
	for _, d := range dead {
		if err := lab.Kill(d); err != nil {
			res.err = err
			return res
		}
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
		res.err = err
		return res
	}

	// What B's agent does: render the set the controller published (the
	// live nodes and B) and apply it. BIRD 1.6 ends its recovery when a
	// reload drops the dead peers, so the agent may start beside BIRD;
	// BIRD 2 does not (2.0.12), so there the agent stages the set, checked
	// by BIRD's parser, before BIRD starts.
	var set []bird.Peer
	for _, node := range live {
		set = append(set, node.Peer())
	}
	sync := func(want agent.Outcome) error {
		s, err := agent.NewSyncer(b.MeshPath, b.Client(), lab.MeshConfig(b, nil))
		if err != nil {
			return err
		}
		s.SetCheck(agent.ParseCheck(bins.Bird, b.Config))
		got, err := s.Sync(ctx, set)
		if got != want {
			return fmt.Errorf("agent sync: %s, want %s: %v", got, want, err)
		}
		return nil
	}
	stageFirst := rebound && bins.Version == bird.Bird2
	if stageFirst {
		if err := sync(agent.Staged); err != nil {
			res.err = err
			return res
		}
	}
	start := time.Now()
	if err := lab.Start(ctx, b, true); err != nil {
		res.err = err
		return res
	}
	if rebound && !stageFirst {
		if err := sync(agent.Reloaded); err != nil {
			res.err = err
			return res
		}
	}
	for time.Since(start) < limit && (res.birdTable < 0 || (netns && res.kernel < 0)) {
		if res.birdTable < 0 {
			if ok, _ := birdlab.RoutesAt(ctx, live, b); ok {
				res.birdTable = time.Since(start)
			}
		}
		if netns && res.kernel < 0 {
			if ok, _ := kernelHas(lab, live); ok {
				res.kernel = time.Since(start)
			}
		}
		select {
		case <-ctx.Done():
			res.err = ctx.Err()
			return res
		case <-time.After(100 * time.Millisecond):
		}
	}
	return res
}

// kernelHas reports whether the kernel table has every live node's route.
func kernelHas(lab *birdlab.Lab, live []*birdlab.Node) (bool, string) {
	out, err := lab.KernelRoutes()
	if err != nil {
		return false, err.Error()
	}
	for _, n := range live {
		if !strings.Contains(out, n.Route.String()+" ") {
			return false, "kernel lacks " + n.Route.String()
		}
	}
	return true, ""
}

func allHave(ctx context.Context, lab *birdlab.Lab, live []*birdlab.Node, b *birdlab.Node, netns bool) (bool, string) {
	if ok, why := birdlab.RoutesAt(ctx, live, b); !ok {
		return false, why
	}
	if netns {
		return kernelHas(lab, live)
	}
	return true, ""
}
