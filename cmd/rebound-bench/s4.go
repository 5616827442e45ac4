package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/scenario"
	"rebound/pkg/peering/bird"
)

func runS4(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("s4", flag.ContinueOnError)
	sizesFlag := fs.String("sizes", "10", "cluster sizes, 3..32; half of each (rounded up) dies, one of those returns")
	returnFlag := fs.String("return-after", "0s", "when the node returns after the failure, e.g. 10s,60s,300s; 0s means as soon as the live nodes dropped its route")
	versions := fs.String("bird", "1.6,2", "BIRD versions: 1.6, 2 or both")
	netns := fs.Bool("netns", os.Geteuid() == 0, "run each lab in its own network namespace and measure the returning node's kernel table (needs root)")
	verbose := fs.Bool("v", false, "print every lab's timeline as it happens")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: rebound-bench s4 [flags]

Scenario S4 (seed 003) with real BIRD, run by the same code as the e2e tests
and the demo (internal/lab/scenario.RunS4Return). For each BIRD version, size N
and return time T, two labs of N BIRD daemons run at the same time (all
lanes at once), on loopback addresses (127.x.y.z, free ports, never 179),
each node announcing a /26 from 198.18.0.0/15 (the benchmarking range), in
Calico's style: full mesh, graceful restart (wait 240 s).

ceil(N/2) nodes are killed (SIGKILL), B among them; T after the failure B's
BIRD restarts in graceful-restart recovery (bird -R).
  without rebound: B's configuration still lists every node;
  with rebound:    B's agent (rebound agent --once, before BIRD starts)
                   renders the start set: the peers with evidence of life.
Measured from B's BIRD start until every live node has B's /26 and B has
every live node's /26 (B's kernel table with -netns).

Example: rebound-bench s4 --return-after 10s,60s,300s   (about 10 minutes)

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts := scenario.S4ReturnOptions{NetNS: *netns, FirstNet: 1}
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 3 || n > 32 {
			return fmt.Errorf("--sizes %q: want sizes between 3 and 32, comma-separated", *sizesFlag)
		}
		opts.Sizes = append(opts.Sizes, n)
	}
	for _, s := range strings.Split(*returnFlag, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 || d > time.Hour {
			return fmt.Errorf("--return-after %q: want durations between 0s and 1h, comma-separated, e.g. 10s,60s,300s", *returnFlag)
		}
		opts.ReturnAfter = append(opts.ReturnAfter, d)
	}
	for _, v := range strings.Split(*versions, ",") {
		bins, err := birdproc.Find(bird.Version(strings.TrimSpace(v)))
		if err != nil {
			return fmt.Errorf("--bird %q: %w: %s", *versions, err, birdproc.InstallHint)
		}
		opts.Bins = append(opts.Bins, bins)
	}
	lanes := len(opts.Bins) * len(opts.Sizes) * len(opts.ReturnAfter) * 2
	if lanes > 30 {
		return fmt.Errorf("%d labs: at most 30 run at once (fewer --sizes, --return-after or --bird)", lanes)
	}
	if *verbose {
		opts.Progress = os.Stderr
	}
	if !*netns {
		fmt.Println("No network namespaces (not root, or -netns=false): BIRD tables only, no kernel table.")
	}
	latest := time.Duration(0)
	for _, d := range opts.ReturnAfter {
		latest = max(latest, d)
	}
	fmt.Printf("S4: %d labs at once; this takes about %s (the last return plus BIRD's 240 s wait)...\n\n", lanes, (latest + 4*time.Minute + 30*time.Second).Round(time.Second))

	res := scenario.RunS4Return(ctx, opts)
	scenario.WriteS4ReturnTable(os.Stdout, res)
	fmt.Println()
	var errs []error
	if err := scenario.WriteS4ReturnMetrics(os.Stdout, res); err != nil {
		errs = append(errs, err)
	}
	for _, l := range res {
		if l.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.Name(), l.Err))
		}
	}
	return errors.Join(errs...)
}
