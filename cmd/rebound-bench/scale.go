package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/lab/report"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scale"
)

func runScale(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	var (
		nodesFlag   = fs.String("nodes", "100,300,1000", "cluster sizes to measure, comma-separated; one size runs in a few minutes")
		podsPerNode = fs.Int("pods-per-node", 20, "pods per node besides the rescued ones (a DaemonSet pod and Deployments of 64 replicas)")
		critical    = fs.Int("critical", 200, "critical single-replica Deployments placed on the nodes that die")
		victims     = fs.Int("victims", 0, "nodes that die (0: 100, or 60% of a smaller cluster)")
		policies    = fs.Int("policies", 20, "RecoveryPolicies (and namespaces) the critical pods are spread over (1 puts all of them under one policy's maxActionsPerMinute)")
		steady      = fs.Duration("steady", time.Minute, "how long the idle controller is watched")
		peeringOn   = fs.Bool("peering", true, "also measure the peering controller and one agent's API traffic with every node reporting")
		leasePlane  = fs.Bool("lease-plane", true, "run the controller with --lease-plane (the Lease informer, and the Lease plane in every rescue)")
		fast        = fs.Bool("fast", false, "use the tests' short timings (lease 8s, grace 12s) instead of upstream's (40s, 50s); heavier on the apiserver")
		bin         = fs.String("rebound", "", "the rebound binary to run as the controller (default: built from this checkout)")
		output      = fs.String("o", "text", "output: text (table and METRIC lines) or json")
		keep        = fs.Bool("keep", false, "keep the sandboxes' folders (logs, audit log) after the run, and print where")
	)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rebound-bench scale [flags]

Runs rebound's recovery controller, as its own process, on a sandbox of N kwok
nodes with about 20 pods per node, and measures: its memory at rest and its
peak during a rescue, CPU per minute at rest, its API requests per minute at
rest by verb (from the apiserver's audit log), the time from each stranded
pod's policy deadline to rebound's delete for critical pods on nodes that die
in a PartialDisruption zone, and the mean planning pass. The sandbox's own
processes (apiserver, etcd, kwok, ...) are measured too: they are what limits
the size on a small machine.

  rebound-bench scale --nodes 100          # one size, a few minutes
  rebound-bench scale                      # 100, 300 and 1,000 nodes

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("-o %q: use text or json", *output)
	}
	var sizes []int
	for _, s := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 || n > sandbox.MaxNodes {
			return fmt.Errorf("--nodes %q: each size must be a number from 10 to %d", *nodesFlag, sandbox.MaxNodes)
		}
		sizes = append(sizes, n)
	}
	// The bench's own clients log nothing worth reading.
	ctrl.SetLogger(logr.Discard())
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Progress: os.Stderr})
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "rebound-bench-scale-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintf(os.Stderr, "scale: sandboxes in %s (kept)\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if *bin == "" {
		if *bin, err = scale.BuildRebound(ctx, tmp); err != nil {
			return err
		}
	}
	timings := sandbox.DefaultTimings()
	if *fast {
		timings = sandbox.FastTimings()
	}

	var results []scale.Result
	for _, n := range sizes {
		o := scale.Options{Nodes: n, Victims: *victims, CriticalPods: *critical, Policies: *policies, Peering: *peeringOn, LeasePlane: *leasePlane, PodsPerNode: *podsPerNode, Steady: *steady, ReboundBin: *bin, Progress: os.Stderr}
		fmt.Fprintf(os.Stderr, "scale: %d nodes\n", n)
		res, err := measureSize(ctx, bins, filepath.Join(tmp, strconv.Itoa(n)), o, timings)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		results = append(results, res)
		if *output == "text" {
			if err := printScaleMetrics(os.Stdout, o, res); err != nil {
				return fmt.Errorf("%d nodes: %w", n, err)
			}
		}
	}
	if *output == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	printScaleTable(os.Stdout, results)
	return nil
}

func measureSize(ctx context.Context, bins sandbox.Binaries, dir string, o scale.Options, timings sandbox.Timings) (scale.Result, error) {
	opts, err := scale.SandboxOptions(o, timings)
	if err != nil {
		return scale.Result{}, err
	}
	opts.Dir, opts.Binaries, opts.Progress = dir, bins, os.Stderr
	t0 := time.Now()
	c, err := sandbox.Start(ctx, opts)
	if err != nil {
		return scale.Result{}, err
	}
	defer c.Stop()
	fmt.Fprintf(os.Stderr, "  sandbox of %d nodes up in %s\n", o.Nodes, time.Since(t0).Round(time.Second))
	return scale.Run(ctx, c, o)
}

func printScaleMetrics(out io.Writer, o scale.Options, r scale.Result) error {
	p := fmt.Sprintf("scale%d_", r.Nodes)
	w := report.NewWriter(out)
	w.Config(p+"pods_per_node", float64(o.PodsPerNode), "count")
	w.Config(p+"critical_pods", float64(o.CriticalPods), "count")
	w.Config(p+"policies", float64(o.Policies), "count")
	w.Config(p+"lease_plane", boolCount(o.LeasePlane), "count")
	w.Count(p+"pods", r.Pods)
	w.MetricDecimals(p+"populate_seconds", r.Population.Took.Seconds(), 0, "s")
	w.Metric(p+"controller_rss_steady", r.SteadyRSSMiB, "MiB")
	w.Metric(p+"controller_rss_peak", r.PeakRSSMiB, "MiB")
	w.Metric(p+"controller_rss_startup_peak", r.StartupPeakRSSMiB, "MiB")
	w.MetricDecimals(p+"controller_cpu_per_min", r.CPUPerMin, 2, "s")
	w.Metric(p+"idle_requests_per_min", r.Idle.PerMinute(total(r.Idle.ByVerb)), "count")
	w.Metric(p+"idle_writes_per_min", r.Idle.PerMinute(r.Idle.Writes), "count")
	w.Metric(p+"idle_lease_renewals_per_min", r.Idle.PerMinute(r.Idle.LeaseWrites), "count")
	w.Metric(p+"idle_passes_per_min", r.Idle.PerMinute(r.IdlePasses), "count")
	for _, kind := range slices.Sorted(maps.Keys(r.IdleTriggers)) {
		w.Metric(p+"idle_triggers_"+strings.ToLower(kind)+"_per_min", r.Idle.PerMinute(r.IdleTriggers[kind]), "count")
	}
	w.Count(p+"stranded_pods", r.Stranded)
	w.Count(p+"deleted_pods", r.Deleted)
	w.Count(p+"repeated_deletes", r.Repeated)
	w.MetricDecimals(p+"deadline_to_delete_p50", r.P50, 3, "s")
	w.MetricDecimals(p+"deadline_to_delete_p99", r.P99, 3, "s")
	w.MetricDecimals(p+"own_deadline_to_delete_p50", r.OwnP50, 3, "s")
	w.MetricDecimals(p+"own_deadline_to_delete_p99", r.OwnP99, 3, "s")
	w.Metric(p+"pass_ms", r.PassMs, "ms")
	if pr := r.Peering; pr != nil {
		w.MetricDecimals(p+"agent_bytes_per_min", pr.AgentBytesPerMin, 0, "bytes")
		w.MetricDecimals(p+"peering_reports_per_min", pr.ReportsPerMin, 0, "count")
		w.Metric(p+"peering_controller_rss", pr.ControllerRSSMiB, "MiB")
		w.Metric(p+"peering_controller_rss_peak", pr.ControllerPeakMiB, "MiB")
	}
	fmt.Fprintf(os.Stderr, "  latest delete after its API deadline: %s\n", r.Latest)
	fmt.Fprintf(os.Stderr, "  latest delete after rebound's own deadline: %s\n", r.OwnLatest)
	for _, name := range slices.Sorted(maps.Keys(r.Components)) {
		u := r.Components[name]
		w.MetricDecimals(p+metricName(name)+"_rss", u.RSSMiB, 0, "MiB")
		w.Metric(p+metricName(name)+"_cpu_per_min", u.CPUPerMin, "s")
	}
	return w.Err()
}

func printScaleTable(w io.Writer, rs []scale.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tpods\tRSS steady MiB\tRSS peak MiB\tCPU s/min\tidle req/min\tidle writes/min\tdeleted/stranded\tdeadline→delete p50 s\tp99 s\tpass ms\tagent bytes/min\tpeering RSS MiB\t")
	for _, r := range rs {
		agentBytes, peeringRSS := "-", "-"
		if pr := r.Peering; pr != nil {
			agentBytes, peeringRSS = fmt.Sprintf("%.0f", pr.AgentBytesPerMin), fmt.Sprintf("%.1f", pr.ControllerRSSMiB)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f\t%d/%d\t%.3f\t%.3f\t%.1f\t%s\t%s\t\n", r.Nodes, r.Pods, r.SteadyRSSMiB, r.PeakRSSMiB, r.CPUPerMin,
			r.Idle.PerMinute(total(r.Idle.ByVerb)), r.Idle.PerMinute(r.Idle.Writes), r.Deleted, r.Stranded, r.P50, r.P99, r.PassMs, agentBytes, peeringRSS)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "nodes\tidle requests by verb (per min; lease renewals of leader election included)\tsandbox at rest: RSS MiB / CPU s per min")
	for _, r := range rs {
		var verbs, comps []string
		for _, v := range slices.Sorted(maps.Keys(r.Idle.ByVerb)) {
			verbs = append(verbs, fmt.Sprintf("%s %.1f", v, r.Idle.PerMinute(r.Idle.ByVerb[v])))
		}
		for _, name := range slices.Sorted(maps.Keys(r.Components)) {
			u := r.Components[name]
			comps = append(comps, fmt.Sprintf("%s %.0f/%.1f", name, u.RSSMiB, u.CPUPerMin))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.Nodes, strings.Join(verbs, ", "), strings.Join(comps, ", "))
	}
	tw.Flush()
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func metricName(component string) string { return strings.ReplaceAll(component, "-", "_") }

// boolCount is 1 for true, for a CONFIG line.
func boolCount(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
