// Package demo boots sandboxes and plays the seed scenarios on them, without
// and with rebound side by side, printing a timeline a person can follow and
// a table of the time to recovery.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"rebound/internal/controller"
	"rebound/internal/lab/report"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/logging"
	"rebound/internal/metricsserving"
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
	// Report is where the self-contained HTML report goes; empty writes
	// none.
	Report string
	// Scenarios are the ids to play (S1, S2); empty means all.
	Scenarios []string
	// InstallDeps installs what a scenario needs and is missing (BIRD for
	// S4) when running as root, as make test does.
	InstallDeps bool
	Build       sandbox.BuildOptions
}

const (
	laneWithout = scenario.LaneWithout
	laneWith    = scenario.LaneWith
)

// Lane is one run of a scenario: without or with rebound.
type Lane struct {
	Scenario string `json:"scenario"`
	Name     string `json:"name"`
	Rebound  bool   `json:"rebound"`
	// Recovered is true when the scenario's workloads came back within the
	// observation; RecoverySeconds is then the time to recovery, from
	// FromSeconds (timeline time of what FromLabel names) to
	// RecoveredAtSeconds. Measured says both ends are the API's own
	// timestamps (conditions' lastTransitionTime). Played is false for a
	// lane that could not run (e.g. no BIRD).
	Recovered          bool    `json:"recovered"`
	Measured           bool    `json:"measured"`
	Played             bool    `json:"played"`
	FromLabel          string  `json:"fromLabel,omitempty"`
	FromSeconds        float64 `json:"fromSeconds"`
	RecoveredAtSeconds float64 `json:"recoveredAtSeconds,omitempty"`
	RecoverySeconds    float64 `json:"recoverySeconds"`
	// Outcome is the lane's cell in the table of the time to recovery.
	Outcome string              `json:"outcome"`
	Events  []scenario.Event    `json:"events"`
	S1      *scenario.S1Result  `json:"s1,omitempty"`
	S2      *scenario.S2Result  `json:"s2,omitempty"`
	S4      *scenario.S4Result  `json:"s4,omitempty"`
	S13     *scenario.S13Result `json:"s13,omitempty"`
	S17     *scenario.S17Result `json:"s17,omitempty"`
}

// ScenarioInfo describes one scenario of the report.
type ScenarioInfo struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	// Measure says what the time to recovery is measured between.
	Measure string `json:"measure"`
}

// Report is the demo's machine-readable result: the scenarios played and
// their lanes, each with its timeline.
type Report struct {
	Started   time.Time       `json:"started"`
	Timings   sandbox.Timings `json:"timings"`
	Observe   float64         `json:"observeSeconds"`
	Scenarios []ScenarioInfo  `json:"scenarios"`
	Lanes     []Lane          `json:"lanes"`
	// Comparisons are the scenarios measured from the API's timestamps,
	// without and with rebound.
	Comparisons []scenario.Comparison `json:"comparisons"`
	// MetricLines are the METRIC lines of scenarios measured otherwise
	// than as one recovery per lane (S13's three figures a lane).
	MetricLines []string `json:"metricLines,omitempty"`
}

var s1Info = ScenarioInfo{
	ID:    "S1",
	Title: "several nodes fail, the zone enters PartialDisruption (seed 000)",
	Description: "5 nodes in one zone; a critical Deployment's pod runs on node-3; nodes 1-4 die. " +
		"Without rebound only kube-controller-manager decides; with rebound, `rebound controller` runs too, with its default policy (30 s).",
	Measure: "from node-3's NotReady transition to the replacement pod's Ready transition (the API's lastTransitionTimes)",
}

// Run plays each scenario twice at the same time: once with only
// upstream's control loops deciding (the seed's failure), once with
// rebound. S1 runs `rebound controller` with its default policy in the
// second sandbox; S2 runs `rebound restore bringup` after the restore; S4
// runs the peering controller and an agent per BIRD node, whose peer set
// the returning BIRD node applies. S1, S2 and S13 run one after the
// other, two sandboxes at a time; S4 runs beside them from the start, on
// a small sandbox of its own.
func Run(ctx context.Context, opts Options) error {
	timings := sandbox.DefaultTimings()
	if opts.Fast {
		timings = sandbox.FastTimings()
	}
	if opts.Observe == 0 {
		opts.Observe = 90 * time.Second
	}
	scenarios, err := selectScenarios(opts.Scenarios)
	if err != nil {
		return err
	}
	if opts.Build.Progress == nil {
		opts.Build.Progress = opts.Progress
	}
	var ids []string
	for _, sc := range scenarios {
		ids = append(ids, sc.info.ID)
	}
	fmt.Fprintf(opts.Progress, "rebound demo: plays %s, each without and with rebound at the same time (timings: node grace %s, pod tolerations %ds)\n",
		strings.Join(ids, ", "), timings.NodeMonitorGracePeriod, timings.DefaultTolerationSeconds)
	var bins sandbox.Binaries
	for _, sc := range scenarios {
		if sc.background != nil { // S4: real BIRD
			ensureBird(ctx, opts)
		}
	}
	// Every scenario runs on a sandbox (S4's Nodes back its BIRD nodes).
	fmt.Fprintf(opts.Progress, "Checking the sandbox control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok): "+
		"built once from their Go modules, about %s on 2 cores the first time (module downloads included), then cached\n", sandbox.ColdBuildTime)
	if bins, err = sandbox.EnsureBinaries(ctx, opts.Build); err != nil {
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
	var live io.Writer
	if !opts.JSON {
		live = &lockedWriter{w: opts.Out}
	}
	env := &runEnv{opts: opts, timings: timings, bins: bins, dir: dir, live: live}
	report := Report{Started: time.Now(), Timings: timings, Observe: opts.Observe.Seconds()}
	// Background scenarios (S4: real BIRD, BIRD's 240 s wait) start first
	// and run beside the others, which run one after the other.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waits := map[string]func() ([]Lane, error){}
	defer func() { // on an early return: stop them and let them clean up
		cancel()
		env.aborted = true
		for _, wait := range waits {
			_, _ = wait()
		}
	}()
	for _, sc := range scenarios {
		if sc.background != nil {
			waits[sc.info.ID] = sc.background(ctx, env)
		}
	}
	for _, sc := range scenarios {
		if sc.background != nil {
			continue
		}
		lanes, err := sc.run(ctx, env)
		if err != nil {
			return err
		}
		report.Scenarios = append(report.Scenarios, sc.info)
		report.Lanes = append(report.Lanes, lanes...)
	}
	for _, sc := range scenarios {
		if wait := waits[sc.info.ID]; wait != nil {
			delete(waits, sc.info.ID)
			lanes, err := wait()
			if err != nil {
				return err
			}
			report.Scenarios = append(report.Scenarios, sc.info)
			report.Lanes = append(report.Lanes, lanes...)
		}
	}
	report.Comparisons = env.comparisons
	report.MetricLines = env.metricLines
	if opts.Report != "" {
		if err := WriteHTMLFile(opts.Report, report); err != nil {
			return fmt.Errorf("write the HTML report: %w", err)
		}
		fmt.Fprintf(opts.Progress, "HTML report: %s\n", opts.Report)
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return printSummary(opts.Out, report)
}

// runEnv is what every scenario of a run shares.
type runEnv struct {
	opts    Options
	timings sandbox.Timings
	bins    sandbox.Binaries
	dir     string
	live    io.Writer // nil with -o json
	// comparisons collects the measured scenarios' comparisons, and
	// metricLines the other scenarios' METRIC lines.
	comparisons []scenario.Comparison
	metricLines []string
	// aborted is set when the run ends early: background scenarios then
	// only clean up, and print nothing more.
	aborted bool
}

type demoScenario struct {
	info ScenarioInfo
	// run plays the scenario; background, if set instead, starts it
	// beside the others and returns a function that waits for its lanes.
	run        func(context.Context, *runEnv) ([]Lane, error)
	background func(context.Context, *runEnv) func() ([]Lane, error)
}

var allScenarios = []demoScenario{
	{info: s1Info, run: runS1},
	{info: s2Info, run: runS2},
	{info: s13Info, run: runS13},
	{info: s17Info, run: runS17},
	{info: s4Info, background: startS4},
}

// ScenarioIDs are the scenarios `rebound demo` can play, in order.
func ScenarioIDs() []string {
	ids := make([]string, len(allScenarios))
	for i, s := range allScenarios {
		ids[i] = s.info.ID
	}
	return ids
}

func selectScenarios(ids []string) ([]demoScenario, error) {
	if len(ids) == 0 {
		return allScenarios, nil
	}
	var out []demoScenario
	for _, s := range allScenarios {
		for _, id := range ids {
			if strings.EqualFold(id, s.info.ID) {
				out = append(out, s)
				break
			}
		}
	}
	for _, id := range ids {
		known := false
		for _, s := range allScenarios {
			known = known || strings.EqualFold(id, s.info.ID)
		}
		if !known {
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", id, strings.Join(ScenarioIDs(), ", "))
		}
	}
	return out, nil
}

// startPair starts the two sandboxes of a scenario at the same time.
func startPair(ctx context.Context, env *runEnv, id string, nodes int) ([]*sandbox.Cluster, func(), error) {
	fmt.Fprintf(env.opts.Progress, "%s: starting two %d-node sandboxes in %s (node grace period %s, pod tolerations %ds)\n",
		id, nodes, env.dir, env.timings.NodeMonitorGracePeriod, env.timings.DefaultTolerationSeconds)
	clusters := make([]*sandbox.Cluster, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, name := range []string{laneWithout, laneWith} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = sandbox.Start(ctx, sandbox.Options{
				Dir: filepath.Join(env.dir, fmt.Sprintf("%s-%d", strings.ToLower(id), i)), Binaries: env.bins, Nodes: nodes, Timings: env.timings,
				Progress: prefixed(env.opts.Progress, "["+id+" "+name+"] "),
			})
		}()
	}
	wg.Wait()
	stop := func() {
		for _, c := range clusters {
			if c != nil {
				_ = c.Stop()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		stop()
		return nil, nil, err
	}
	return clusters, stop, nil
}

func laneWriter(env *runEnv, id, name string) io.Writer {
	return prefixed(env.live, fmt.Sprintf("%-21s ", "["+id+" "+name+"]"))
}

func header(env *runEnv, lines ...string) {
	if env.live == nil {
		return
	}
	fmt.Fprintln(env.live)
	for _, l := range lines {
		fmt.Fprintln(env.live, l)
	}
	fmt.Fprintf(env.live, "\n%-21s %8s  %-8s %-32s %s\n", "lane", "time", "kind", "subject", "what happened")
}

func runS1(ctx context.Context, env *runEnv) ([]Lane, error) {
	clusters, stop, err := startPair(ctx, env, "S1", 5)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctrlCtx, stopController := context.WithCancel(ctx)
	defer stopController()
	with := clusters[1]
	if err := installPolicy(ctx, with.Config); err != nil {
		return nil, fmt.Errorf("install rebound in the sandbox: %w", err)
	}
	if err := startController(ctrlCtx, with); err != nil {
		return nil, err
	}
	header(env, "S1: 5 nodes in one zone; a critical Deployment's pod runs on node-3; nodes 1-4 die.",
		"Without: kube-controller-manager alone. With: the same, plus `rebound controller` with its default policy (30 s).")

	p := newPair(env, "S1", clusters)
	res, err := scenario.RunS1Pair(ctx, p, scenario.S1PairOptions{
		Workload:    scenario.CriticalStandIn("node-3"),
		Survivor:    "node-0",
		Observe:     env.opts.Observe,
		ObserveWith: 30*time.Second + 60*time.Second, // policy time + slack; ends early on recovery
	})
	if err != nil {
		return nil, fmt.Errorf("S1 %w", err)
	}
	lanes := pairLanes("S1", "node-3 NotReady", p, res.Without.Recovery, res.With.Recovery)
	for i, r := range []scenario.S1Result{res.Without, res.With} {
		l := &lanes[i]
		l.S1 = &r
		if r.Recovery.Recovered {
			l.Outcome = fmt.Sprintf("%.1fs (on %s)", l.RecoverySeconds, r.Recovery.PodNode)
		} else {
			l.Outcome = fmt.Sprintf("never: still %d/%d available %.0fs after node-3 NotReady, zone %s", r.Final.Available, r.Final.Desired,
				r.Recovery.UnavailableAtLeast, finalZone(r.Final))
		}
	}
	env.comparisons = append(env.comparisons, res.Comparison)
	return lanes, nil
}

// newPair is a scenario's two sandboxes with a live timeline each.
func newPair(env *runEnv, id string, clusters []*sandbox.Cluster) scenario.Pair {
	return scenario.Pair{Without: clusters[0], With: clusters[1],
		WithoutTimeline: scenario.NewTimeline(laneWriter(env, id, laneWithout)),
		WithTimeline:    scenario.NewTimeline(laneWriter(env, id, laneWith))}
}

// pairLanes are the two lanes of a scenario measured from the API's
// timestamps (label names where the clock starts), with their timelines.
func pairLanes(id, label string, p scenario.Pair, without, with scenario.Recovery) []Lane {
	lanes := []Lane{{Scenario: id, Name: laneWithout}, {Scenario: id, Name: laneWith, Rebound: true}}
	for i, tl := range []*scenario.Timeline{p.WithoutTimeline, p.WithTimeline} {
		lanes[i].Events = tl.Events()
		lanes[i].setMeasured(tl, label, []scenario.Recovery{without, with}[i])
	}
	return lanes
}

func printSummary(out io.Writer, r Report) error {
	fmt.Fprintf(out, "\nTime to recovery, without and with rebound:\n\n")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SCENARIO\tWITHOUT REBOUND\tWITH REBOUND\tMEASURED")
	for _, s := range r.Scenarios {
		cells := map[string]string{laneWithout: "not played", laneWith: "not played"}
		for _, l := range r.Lanes {
			if l.Scenario == s.ID {
				cells[l.Name] = l.Outcome
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.ID, cells[laneWithout], cells[laneWith], s.Measure)
	}
	w.Flush()
	fmt.Fprintln(out)
	if err := writeMetrics(report.NewWriter(out), r); err != nil {
		return err
	}
	for _, s := range r.Scenarios {
		if s.ID == "S1" {
			fmt.Fprintf(out, "\nS1: without rebound the zone is in PartialDisruption, so the eviction rate is 0: node-3 never gets the\n")
			fmt.Fprintf(out, "NoExecute taint and the pod is never replaced, although node-0 is Ready (the restore failure of the\n")
			fmt.Fprintf(out, "seed report). rebound deletes the stranded pod once it has sat on the NotReady node for the policy's\n")
			fmt.Fprintf(out, "30 s, and its ReplicaSet replaces it on node-0, while the zone is still in PartialDisruption.\n")
		}
		if s.ID == "S2" {
			fmt.Fprintf(out, "\nS2: the restored cluster replays the health it had at backup time, then nodes 1-4 go NotReady, the zone\n")
			fmt.Fprintf(out, "enters PartialDisruption and nothing is evicted: the status wait times out, as the seed's restore did.\n")
			fmt.Fprintf(out, "`rebound restore bringup` deletes the essential pods stranded on NotReady nodes, and their ReplicaSets\n")
			fmt.Fprintf(out, "replace them on node-0 within the deadline.\n")
		}
		if s.ID == "S13" {
			fmt.Fprintf(out, "\nS13: without rebound nothing moves until kube-controller-manager's node grace runs out, and the pod only\n")
			fmt.Fprintf(out, "after its toleration. With rebound the controller sees node-3's Lease go stale on its own clock and the\n")
			fmt.Fprintf(out, "agents' gossip watchers find it dead by their own probes: the node is tainted, its endpoint taken out,\n")
			fmt.Fprintf(out, "and the critical pod replaced, seconds after the death.\n")
		}
		if s.ID == "S4" {
			fmt.Fprintf(out, "\nS4: without rebound the returning BIRD still lists the dead peer and, in graceful-restart recovery,\n")
			fmt.Fprintf(out, "announces and programs nothing until its wait runs out. With rebound the peering controller takes the\n")
			fmt.Fprintf(out, "dead node out of the set and the returning node's agent renders the live peers, which ends the\n")
			fmt.Fprintf(out, "recovery as soon as those sessions are up.\n")
		}
	}
	return nil
}

// writeMetrics writes the report's figures in the form tools collect (see
// the design's conventions): measured values as METRIC lines, settings as
// CONFIG.
func writeMetrics(w *report.Writer, r Report) error {
	for _, c := range r.Comparisons {
		c.Write(w)
	}
	for _, s := range r.MetricLines {
		l, err := report.Parse(s)
		if err != nil {
			return fmt.Errorf("the report's metric lines: %w", err)
		}
		w.Write(l)
	}
	for _, l := range r.Lanes {
		if l.Measured {
			continue // in a comparison above
		}
		lane := "without_rebound"
		if l.Name == laneWith {
			lane = "with_rebound"
		}
		if l.Recovered {
			w.Metric(strings.ToLower(l.Scenario)+"_recovery_"+lane, l.RecoverySeconds, "s")
		} else if l.Played {
			w.Count(strings.ToLower(l.Scenario)+"_"+lane+"_recovered", 0)
		}
	}
	return w.Err()
}

func finalZone(s scenario.Snapshot) string {
	for _, z := range s.Zones {
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
	logging.Set(slog.NewTextHandler(f, nil))
	mgr, err := controller.NewManager(c.Config, controller.ManagerOptions{Metrics: metricsserving.Config{Addr: "0"}, HealthAddr: "0", SyncPeriod: 10 * time.Minute})
	if err != nil {
		return err
	}
	if err := controller.SetupRecovery(mgr, controller.RecoveryOptions{ZoneConfig: c.Timings.ZoneConfig()}); err != nil {
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

// setRecovery records when the lane's clock starts (from, named label) and,
// if it recovered, when and how long after, in timeline time: for the
// scenarios whose clock is not an API object's condition (S4's routes).
func (l *Lane) setRecovery(label string, from, at time.Duration, recovered bool) {
	l.FromLabel = label
	l.FromSeconds = from.Seconds()
	l.Recovered = recovered
	l.Played = true
	if recovered {
		l.RecoveredAtSeconds = at.Seconds()
		l.RecoverySeconds = (at - from).Seconds()
	}
}

// setMeasured records a recovery measured from the API's timestamps,
// placed on the lane's timeline.
func (l *Lane) setMeasured(tl *scenario.Timeline, label string, r scenario.Recovery) {
	l.setRecovery(label, tl.At(r.NotReadySince), tl.At(r.PodReadySince), r.Recovered)
	l.Measured = true
	if r.Recovered {
		l.RecoverySeconds = r.Seconds
	}
}
