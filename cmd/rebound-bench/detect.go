package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/agent/gossip"
	"rebound/internal/lab/hoststandin"
	"rebound/internal/lab/install"
	"rebound/internal/lab/report"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scale"
	"rebound/internal/lab/scenario"
	"rebound/pkg/liveness"
)

func runDetect(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	var (
		nodesFlag  = fs.String("nodes", "30,100", "gossip memberships to measure (load per agent, detection), comma-separated; 3 to 1000 members each, all in this process: beyond about 200 members a 2-core machine starves its own members, and what it measures is the machine")
		window     = fs.Duration("window", time.Minute, "how long each membership's steady state is measured")
		fast       = fs.Bool("fast", false, "play S13 with the tests' short timings (lease 8 s, grace 12 s, tolerations 20 s) instead of upstream's defaults (40 s, 50 s, 300 s)")
		skipS13    = fs.Bool("skip-s13", false, "measure only the gossip memberships, not S13 on the sandboxes")
		bin        = fs.String("rebound", "", "the rebound binary to run as the controller and the agents (default: built from this checkout)")
		keep       = fs.Bool("keep", false, "keep the sandboxes' folders (logs) after the run, and print where")
		deaths     = fs.Int("deaths", 10, "how many deaths the lane with rebound measures, one after another, each at a random point of the dying node's Lease renew interval (the lane without rebound needs one)")
		distrust   = fs.Duration("gossip-distrust-window", liveness.DefaultGossipDistrustWindow, "the controller's --gossip-distrust-window: the product's default, which the lab's other controllers shorten to 15 s (a death and its return inside the window are what it is tested against)")
		rebootDown = fs.Duration("reboot-down", 30*time.Second, "in the rolling reboot lane, how long each node is down (its Lease stopped, its host silent, its agent frozen)")
		skipReboot = fs.Bool("skip-rolling-reboot", false, "skip the rolling reboot lane (every node reboots in turn, then one dies)")
	)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rebound-bench detect [flags]

Two-plane detection (docs/detection.md), measured two ways.

S13 on two 5-node sandboxes at once, with upstream's default timings (the
kubelet's Lease renewed every 10 s, node grace 50 s, tolerations 300 s):
the node that runs a critical Deployment's only pod and one of a Service's
two endpoints dies outright: its Lease stops and its host goes silent
(its kubelet port drops packets, its agent is frozen).
Without rebound, kube-controller-manager alone, one death (node-3);
with rebound, `+"`rebound controller --lease-plane --mark-pods-not-ready-early`"+`,
gossiping agents on every node and a TwoPlanes policy (maxUnavailableTime
0s), --deaths deaths one after another: each kills the node that holds the
pod then, at a uniformly random point of its Lease's renew interval (where
in the interval a node dies decides how long its Lease still looks
fresh), measures, brings the node back and waits until both planes hold
it alive again. The controller taints at most 2 nodes a minute on 5
nodes (its safety cap), so the deaths go two a minute: 10 take about 5
minutes, while the lane without rebound waits for upstream's 350 s.
Printed from each death: where in the renew interval it came, the
verdict, the endpoint off, the replacement Ready; for rebound their
median and worst, the worst held to 15 s. The controller runs with the
product's --gossip-distrust-window (3 minutes), so the deaths begin
after its start-up hold of that long, and a node's later deaths must
be judged like its first.

Then, on the same sandbox, a rolling reboot: each of the 5 nodes goes
down for --reboot-down and comes back, one after another, as for a
kernel update, and then the node that holds the critical pod dies: its
verdict and its replacement, after the reboots, are held to the same
bound. About 20 minutes in all with the default 10 deaths.

Then, for each --nodes size, that many gossip members in this process on
loopback addresses: the bytes per second each agent sends and receives in
the steady state, and how long after one member is killed a quorum of its
watchers has written it dead.

  rebound-bench detect                   # both, with --nodes 30,100
  rebound-bench detect --deaths 30 --nodes 30      # a firmer worst: 15 minutes
  rebound-bench detect --skip-s13 --nodes 30,300   # on 8 cores or more

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *deaths < 1 {
		return fmt.Errorf("--deaths %d: measure at least 1 death (the default is 10)", *deaths)
	}
	var sizes []int
	for _, s := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 3 || n > 1000 {
			return fmt.Errorf("--nodes %q: each size must be a number from 3 to 1000", *nodesFlag)
		}
		sizes = append(sizes, n)
	}
	ctrl.SetLogger(logr.Discard())
	if !*skipS13 {
		if err := detectS13(ctx, detectOptions{bin: *bin, fast: *fast, keep: *keep, deaths: *deaths, distrust: *distrust, rebootDown: *rebootDown, reboot: !*skipReboot}); err != nil {
			return err
		}
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "members\tsent B/s per agent\treceived B/s per agent\tbusiest B/s\tdeath to quorum Dead\tto all watchers\twrites")
	var results []gossip.LoadResult
	var failed []error
	loadHosts, closeHosts, err := startLoadHosts()
	if err != nil {
		return err
	}
	defer closeHosts()
	for _, n := range sizes {
		fmt.Fprintf(os.Stderr, "detect: %d gossip members on loopback, %s of steady state ...\n", n, *window)
		r, err := gossip.MeasureLoad(ctx, n, *window, loadHosts)
		if err != nil {
			// One size failing (a small machine running hundreds of
			// members in one process) still leaves the others' figures.
			failed = append(failed, fmt.Errorf("%d members: %w", n, err))
			fmt.Fprintf(tw, "%d\tfailed: %v\n", n, err)
			continue
		}
		results = append(results, r)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.1fs\t%.1fs\t%d\n", r.Members, r.SentPerSecond, r.ReceivedPerSecond, r.MaxPerSecond,
			r.Detection.Seconds(), r.DetectionAll.Seconds(), r.Writes)
	}
	tw.Flush()
	w := report.NewWriter(os.Stdout)
	for _, r := range results {
		p := fmt.Sprintf("gossip_%d_", r.Members)
		w.MetricDecimals(p+"sent_per_agent", r.SentPerSecond, 0, "B/s")
		w.MetricDecimals(p+"received_per_agent", r.ReceivedPerSecond, 0, "B/s")
		w.Metric(p+"death_to_quorum", r.Detection.Seconds(), "s")
		w.Count(p+"writes_per_death", r.Writes)
	}
	w.Config("gossip_window", window.Seconds(), "s")
	return errors.Join(append(failed, w.Err())...)
}

// detectOptions are detectS13's flags.
type detectOptions struct {
	bin        string
	fast, keep bool
	deaths     int
	distrust   time.Duration
	rebootDown time.Duration
	reboot     bool
}

// detectS13 plays S13 on two sandboxes with the default (or fast) timings.
func detectS13(ctx context.Context, o detectOptions) error {
	bin, fast, keep, deaths := o.bin, o.fast, o.keep, o.deaths
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Progress: os.Stderr})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rebound-bench-detect-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintf(os.Stderr, "detect: sandboxes in %s (kept)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if bin == "" {
		fmt.Fprintln(os.Stderr, "detect: building rebound ...")
		if bin, err = scale.BuildRebound(ctx, dir); err != nil {
			return err
		}
	}
	timings := sandbox.DefaultTimings()
	if fast {
		timings = sandbox.FastTimings()
	}
	clusters := make([]*sandbox.Cluster, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, fmt.Sprintf("s13-%d", i)), Binaries: bins, Nodes: 5, Timings: timings, Progress: os.Stderr})
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range clusters {
			if c != nil {
				_ = c.Stop()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	with := clusters[1]
	cl, err := scale.Install(ctx, with)
	if err != nil {
		return err
	}
	if err := install.DetectionFor(ctx, cl, "rebound-bench", sandbox.ReboundUser); err != nil {
		return err
	}
	if _, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-bench"}, []byte(scenario.S13Policy)); err != nil {
		return err
	}
	// The product's distrust window, not the lab's 15 s: it is what a
	// death after a return is judged under (the flag's last value wins).
	ctl, err := scale.StartController(with, bin, "rebound-controller", "--lease-plane", "--mark-pods-not-ready-early",
		"--gossip-distrust-window="+o.distrust.String())
	if err != nil {
		return err
	}
	defer func() { ctl.Signal(syscall.SIGTERM); ctl.Wait() }()
	if err := ctl.WaitReady(ctx, time.Minute); err != nil {
		return err
	}
	agents, err := scenario.StartGossipAgents(ctx, with, scenario.GossipAgentOptions{Binary: bin})
	if err != nil {
		return err
	}
	defer scenario.StopAll(agents)
	// The controller holds early judgement for its distrust window after
	// it starts: the death comes after it.
	fmt.Fprintf(os.Stderr, "detect: the controller holds early judgement for its distrust window (%s) after it starts ...\n", o.distrust)
	if err := scenario.WaitEarlyJudgement(ctx, ctl.Log, o.distrust+time.Minute); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "detect: S13 on two 5-node sandboxes (Lease renewed every %s, node grace %s, tolerations %ds), %d deaths with rebound ...\n",
		timings.NodeLeaseDuration/4, timings.NodeMonitorGracePeriod, timings.DefaultTolerationSeconds, deaths)
	p := scenario.Pair{Without: clusters[0], With: with,
		WithoutTimeline: scenario.NewTimeline(prefixed("[without rebound] ")), WithTimeline: scenario.NewTimeline(prefixed("[with rebound]    "))}
	started := time.Now()
	series := scenario.S13SeriesOptions{
		Workload: scenario.CriticalStandIn("node-3"),
		Peer:     "node-0",
		Deaths:   deaths,
		Kill:     func(n string) error { return agents[n].HostDeath() },
		Revive:   func(n string) error { return agents[n].HostRevive() },
		Agents:   with.NodeNames,
	}
	res, err := scenario.RunS13SeriesPair(ctx, p, scenario.S13SeriesPairOptions{Series: series})
	if err != nil {
		// The deaths measured before the failure are figures too.
		printSeries(res)
		return err
	}
	printSeries(res)
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	verdict, off, ready := res.Figures()
	fmt.Fprintln(tw, "from the death\twithout rebound (1 death)\twith rebound: median\tworst")
	fmt.Fprintf(tw, "verdict\t%.1fs (NotReady)\t%.1fs (taint %s)\t%.1fs\n", res.Without.Verdict.Seconds(), verdict.Median.Seconds(), scenario.UnreachableTaint, verdict.Worst.Seconds())
	fmt.Fprintf(tw, "endpoint off\t%.1fs\t%.1fs\t%.1fs\n", res.Without.EndpointsOff.Seconds(), off.Median.Seconds(), off.Worst.Seconds())
	fmt.Fprintf(tw, "replacement Ready\t%.1fs\t%.1fs\t%.1fs\n", res.Without.ReplacementReady.Seconds(), ready.Median.Seconds(), ready.Worst.Seconds())
	tw.Flush()
	fmt.Fprintf(os.Stderr, "detect: S13 took %s\n", time.Since(started).Round(time.Second))
	w := report.NewWriter(os.Stdout)
	res.Write(w)
	w.Config("s13_node_grace", timings.NodeMonitorGracePeriod.Seconds(), "s")
	w.Config("s13_lease_renew_interval", (timings.NodeLeaseDuration / 4).Seconds(), "s")
	w.Config("detect_gossip_distrust_window", o.distrust.Seconds(), "s")
	var failed []error
	if ready.Worst > scenario.S13ReplacementBound {
		failed = append(failed, fmt.Errorf("the worst death's replacement was Ready %.1fs after it, beyond the bound %s", ready.Worst.Seconds(), scenario.S13ReplacementBound))
	}
	if o.reboot {
		fmt.Fprintf(os.Stderr, "detect: rolling reboot: each node down %s in turn, then a death ...\n", o.rebootDown)
		rr, err := scenario.RunS13RollingReboot(ctx, with, p.WithTimeline, scenario.S13RollingRebootOptions{Series: series, Down: o.rebootDown, Marked: res.Marks()})
		if err != nil {
			failed = append(failed, fmt.Errorf("rolling reboot: %w", err))
		} else {
			d := rr.Death
			fmt.Printf("\nafter a rolling reboot of %d nodes (each down %s): %s died %.2fs after its renewal; verdict %.1fs, endpoint off %.1fs, replacement Ready %.1fs\n",
				len(rr.Returned), o.rebootDown, d.Victim, d.Offset.Seconds(), d.Verdict.Seconds(), d.EndpointsOff.Seconds(), d.ReplacementReady.Seconds())
			w.Metric("detect_after_rolling_reboot", d.Verdict.Seconds(), "s")
			w.Metric("detect_after_rolling_reboot_replacement_ready", d.ReplacementReady.Seconds(), "s")
			if d.ReplacementReady > scenario.S13ReplacementBound {
				failed = append(failed, fmt.Errorf("after the rolling reboot the replacement was Ready %.1fs after the death, beyond the bound %s", d.ReplacementReady.Seconds(), scenario.S13ReplacementBound))
			}
		}
		w.Config("detect_rolling_reboot_down", o.rebootDown.Seconds(), "s")
	}
	return errors.Join(append(failed, w.Err())...)
}

// printSeries prints each death of the lane with rebound.
func printSeries(res scenario.S13SeriesPair) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "with rebound\tnode\tin the renew interval\tverdict (taint)\tendpoint off\treplacement Ready")
	for i, d := range res.With {
		fmt.Fprintf(tw, "death %d\t%s\t%.2fs\t%.1fs\t%.1fs\t%.1fs\n", i+1, d.Victim, d.Offset.Seconds(), d.Verdict.Seconds(), d.EndpointsOff.Seconds(), d.ReplacementReady.Seconds())
	}
	tw.Flush()
}

// prefixed writes each timeline line to stderr behind p.
func prefixed(p string) *linePrefixer { return &linePrefixer{prefix: p} }

type linePrefixer struct {
	mu     sync.Mutex
	prefix string
}

func (l *linePrefixer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprint(os.Stderr, l.prefix+line)
		}
	}
	return len(b), nil
}

// startLoadHosts runs the two host stand-ins gossip.MeasureLoad's members
// probe: one that answers, one silenced (it drops every SYN).
func startLoadHosts() (gossip.LoadHosts, func(), error) {
	live, err := hoststandin.Listen("live host", gossip.LoadHostAddrs[0].String())
	if err != nil {
		return gossip.LoadHosts{}, nil, fmt.Errorf("gossip load: %w", err)
	}
	silent, err := hoststandin.Listen("silent host", gossip.LoadHostAddrs[1].String())
	if err == nil {
		err = silent.Silence()
	}
	if err != nil {
		live.Close()
		if silent != nil {
			silent.Close()
		}
		return gossip.LoadHosts{}, nil, fmt.Errorf("gossip load: %w", err)
	}
	hosts := gossip.LoadHosts{
		Live:   netip.AddrPortFrom(gossip.LoadHostAddrs[0], uint16(live.Port)),
		Silent: netip.AddrPortFrom(gossip.LoadHostAddrs[1], uint16(silent.Port)),
	}
	return hosts, func() { live.Close(); silent.Close() }, nil
}
