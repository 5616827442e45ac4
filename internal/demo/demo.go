// Package demo boots sandboxes and plays the seed scenarios on them, without
// and with rebound side by side, printing a timeline a person can follow and
// a table of the time to recovery.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/controller"
	"rebound/internal/sandbox"
	"rebound/internal/scenario"
	"rebound/pkg/zone"
)

// Options configure a demo run.
type Options struct {
	// Fast uses the shortened timings of the tests instead of the
	// upstream defaults.
	Fast bool
	// Observe is how long S1 without rebound watches the stranded pod.
	Observe time.Duration
	// Dir holds the sandboxes; empty means a temporary folder, removed at
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

// Lane is one run of a scenario: without or with rebound.
type Lane struct {
	Name    string            `json:"name"`
	Rebound bool              `json:"rebound"`
	Result  scenario.S1Result `json:"result"`
	Events  []scenario.Event  `json:"events"`
	// Recovery is the time from the pod's node going NotReady to the
	// workload being available again; negative when it did not recover.
	RecoverySeconds float64 `json:"recoverySeconds"`
}

// Report is the demo's machine-readable result.
type Report struct {
	Scenario string          `json:"scenario"`
	Timings  sandbox.Timings `json:"timings"`
	Observe  float64         `json:"observeSeconds"`
	Lanes    []Lane          `json:"lanes"`
}

// Run plays S1 twice at the same time, in two sandboxes: once with only
// kube-controller-manager deciding (the seed's failure), once with
// `rebound controller` and its default policy running too.
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
	fmt.Fprintf(opts.Progress, "Starting two 5-node sandboxes in %s (node grace period %s, pod tolerations %ds)\n",
		dir, timings.NodeMonitorGracePeriod, timings.DefaultTolerationSeconds)

	lanes := []*Lane{{Name: "without rebound"}, {Name: "with rebound", Rebound: true}}
	clusters := make([]*sandbox.Cluster, len(lanes))
	errs := make([]error, len(lanes))
	var wg sync.WaitGroup
	for i, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = sandbox.Start(ctx, sandbox.Options{
				Dir: filepath.Join(dir, fmt.Sprintf("s1-%d", i)), Binaries: bins, Nodes: 5, Timings: timings,
				Progress: prefixed(opts.Progress, "["+l.Name+"] "),
			})
		}()
	}
	wg.Wait()
	for i := range lanes {
		if clusters[i] != nil {
			defer clusters[i].Stop()
		}
		if errs[i] != nil {
			return errs[i]
		}
	}
	with := clusters[1]
	if err := installRebound(ctx, with.Config); err != nil {
		return fmt.Errorf("install rebound in the sandbox: %w", err)
	}
	if err := startController(ctx, with); err != nil {
		return err
	}

	var live io.Writer
	if !opts.JSON {
		live = &lockedWriter{w: opts.Out}
		fmt.Fprintf(opts.Out, "\nS1: 5 nodes in one zone; a critical Deployment's pod runs on node-3; nodes 1-4 die.\n")
		fmt.Fprintf(opts.Out, "Left: kube-controller-manager alone. Right: the same, plus `rebound controller` with its default policy (30 s).\n\n")
		fmt.Fprintf(opts.Out, "%-17s %8s  %-8s %-32s %s\n", "lane", "time", "kind", "subject", "what happened")
	}
	for i, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			observe := opts.Observe
			if l.Rebound {
				observe = 30*time.Second + 60*time.Second // policy time + slack; ends early on recovery
			}
			tl := scenario.NewTimeline(prefixed(live, fmt.Sprintf("%-17s ", "["+l.Name+"]")))
			l.Result, errs[i] = scenario.RunS1(ctx, clusters[i], tl, scenario.S1Options{
				Workload: scenario.CriticalStandIn("node-3"),
				Survivor: "node-0",
				Observe:  observe,
			})
			l.Events = tl.Events()
			l.RecoverySeconds = -1
			if l.Result.Recovered {
				l.RecoverySeconds = (l.Result.RecoveredAt - l.Result.PodNodeNotReadyAt).Seconds()
			}
		}()
	}
	wg.Wait()
	for i := range lanes {
		if errs[i] != nil {
			return fmt.Errorf("S1 %s: %w (logs in %s)", lanes[i].Name, errs[i], filepath.Join(clusters[i].Dir, "logs"))
		}
	}

	report := Report{Scenario: "S1", Timings: timings, Observe: opts.Observe.Seconds()}
	for _, l := range lanes {
		report.Lanes = append(report.Lanes, *l)
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printSummary(opts.Out, report)
	return nil
}

func printSummary(out io.Writer, r Report) {
	fmt.Fprintf(out, "\nTime to recovery, from node-3 NotReady to the critical Deployment Available again:\n\n")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SCENARIO\tWITHOUT REBOUND\tWITH REBOUND")
	cells := make([]string, len(r.Lanes))
	for i, l := range r.Lanes {
		switch {
		case l.Result.Recovered:
			cells[i] = fmt.Sprintf("%.1fs (on %s)", l.RecoverySeconds, "node-0")
		default:
			cells[i] = fmt.Sprintf("never: still %d/%d available after %.0fs, zone %s", l.Result.Final.Available, l.Result.Final.Desired,
				r.Observe, finalZone(l))
		}
	}
	fmt.Fprintf(w, "S1 (seed 000)\t%s\t%s\n", cells[0], cells[1])
	w.Flush()
	fmt.Fprintf(out, "\nWithout rebound the zone is in PartialDisruption, so the eviction rate is 0: node-3 never gets the\n")
	fmt.Fprintf(out, "NoExecute taint and the pod is never replaced, although node-0 is Ready (the restore failure of the\n")
	fmt.Fprintf(out, "seed report). rebound deletes the stranded pod once it has sat on the NotReady node for the policy's\n")
	fmt.Fprintf(out, "30 s, and its ReplicaSet replaces it on node-0, while the zone is still in PartialDisruption.\n")
}

func finalZone(l Lane) string {
	for _, z := range l.Result.Final.Zones {
		return z
	}
	return "unknown"
}

// startController runs the recovery controller in this process against the
// sandbox, logging to the sandbox's log folder.
func startController(ctx context.Context, c *sandbox.Cluster) error {
	f, err := os.Create(filepath.Join(c.Dir, "logs", "rebound-controller.log"))
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(f, nil)))
	mgr, err := controller.NewManager(c.Config, controller.ManagerOptions{MetricsAddr: "0", HealthAddr: "0", SyncPeriod: 10 * time.Minute})
	if err != nil {
		return err
	}
	if err := controller.SetupRecovery(mgr, controller.RecoveryOptions{ZoneConfig: zone.DefaultConfig()}); err != nil {
		return err
	}
	go func() {
		defer f.Close()
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(f, "controller stopped: %v\n", err)
		}
	}()
	return nil
}

// lockedWriter serialises writes from the two lanes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixed prefixes every write (one line each) with p; nil stays nil.
func prefixed(w io.Writer, p string) io.Writer {
	if w == nil {
		return nil
	}
	return prefixWriter{prefix: p, w: w}
}

type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}
