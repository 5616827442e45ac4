// Package demo boots a sandbox and plays the seed scenarios on it, printing
// a timeline a person can follow.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"rebound/internal/sandbox"
	"rebound/internal/scenario"
)

// Options configure a demo run.
type Options struct {
	// Fast uses the shortened timings of the tests instead of the
	// upstream defaults.
	Fast bool
	// Observe is how long S1 watches the stranded pod.
	Observe time.Duration
	// Dir is the sandbox folder; empty means a temporary one, removed at
	// the end unless Keep.
	Dir  string
	Keep bool
	// JSON prints one JSON document at the end instead of the live
	// timeline.
	JSON bool
	// Out gets the timeline or the JSON; Progress gets build and start-up
	// lines.
	Out, Progress io.Writer
	Build         sandbox.BuildOptions
}

// Report is the demo's machine-readable result.
type Report struct {
	Scenario string            `json:"scenario"`
	Timings  sandbox.Timings   `json:"timings"`
	Result   scenario.S1Result `json:"result"`
	Events   []scenario.Event  `json:"events"`
}

// Run plays S1 without rebound: the failure of the seed report, reproduced
// with the upstream controller-manager.
func Run(ctx context.Context, opts Options) error {
	timings := sandbox.DefaultTimings()
	if opts.Fast {
		timings = sandbox.FastTimings()
	}
	if opts.Observe == 0 {
		opts.Observe = 90 * time.Second
	}
	bins, err := sandbox.EnsureBinaries(ctx, opts.Build)
	if err != nil {
		return err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rebound-demo-"); err != nil {
			return err
		}
		if !opts.Keep {
			defer os.RemoveAll(dir)
		}
	}
	fmt.Fprintf(opts.Progress, "Starting a 5-node sandbox in %s (node grace period %s, pod tolerations %ds)\n",
		dir, timings.NodeMonitorGracePeriod, timings.DefaultTolerationSeconds)
	c, err := sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: bins, Nodes: 5, Timings: timings, Progress: opts.Progress})
	if err != nil {
		return err
	}
	defer c.Stop()

	var live io.Writer
	if !opts.JSON {
		live = opts.Out
		fmt.Fprintf(opts.Out, "\nS1 without rebound: 5 nodes in one zone; the critical pod runs on node-3; nodes 1-4 die.\n")
		fmt.Fprintf(opts.Out, "kube-controller-manager's own node lifecycle controller decides; rebound does nothing.\n\n")
		fmt.Fprintf(opts.Out, "%8s  %-8s %-32s %s\n", "time", "kind", "subject", "what happened")
	}
	tl := scenario.NewTimeline(live)
	res, err := scenario.RunS1(ctx, c, tl, scenario.S1Options{
		Workload: scenario.CriticalStandIn("node-3"),
		Survivor: "node-0",
		Observe:  opts.Observe,
	})
	if err != nil {
		return fmt.Errorf("S1: %w (logs in %s)", err, c.Dir+"/logs")
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(Report{Scenario: "S1-without-rebound", Timings: timings, Result: res, Events: tl.Events()})
	}
	fmt.Fprintln(opts.Out)
	if res.Recovered {
		fmt.Fprintf(opts.Out, "The workload recovered by itself this time (%.1fs after node-3 went NotReady).\n", (res.RecoveredAt - res.PodNodeNotReadyAt).Seconds())
	} else {
		fmt.Fprintf(opts.Out, "Result: %.0fs after node-3 went NotReady, kube-system/calico-kube-controllers is still %d/%d available.\n",
			opts.Observe.Seconds(), res.Final.Available, res.Final.Desired)
		fmt.Fprintf(opts.Out, "The zone is in PartialDisruption, so the eviction rate is 0: node-3 never gets the NoExecute taint\n")
		fmt.Fprintf(opts.Out, "and its pod is never replaced, although node-0 is Ready. This is the restore failure of the seed report.\n")
	}
	return nil
}
