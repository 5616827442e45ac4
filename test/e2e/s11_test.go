package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/peering"
)

// TestS11OneReporterCannotPrune: one Ready agent reports BFD Down, since
// an hour ago, for four NotReady nodes. Where another Ready agent reports
// them Established, none leaves the set for 3x the prune grace. Where
// nobody contradicts it, none leaves before the grace has run from its
// NotReady transition in the API (the reported hour counts for nothing),
// and the incident's leave budget holds the fourth.
func TestS11OneReporterCannotPrune(t *testing.T) {
	t.Parallel()
	setCtrlLogger.Do(func() { ctrl.SetLogger(logr.Discard()) })
	c := startSandbox(t, 12, sandbox.FastTimings())
	ctx := testContext(t, 5*time.Minute)
	opts := scenario.S11ReporterOptions{PruneGrace: 5 * time.Second, ReportMaxAge: 20 * time.Second, Logs: testLogWriter(t)}
	res, err := scenario.S11OneReporter(ctx, c, scenario.NewTimeline(testWriter(t)), opts)
	if err != nil {
		t.Fatal(err)
	}
	config(t, "s11_prune_grace", opts.PruneGrace.Seconds(), "s")
	config(t, "s11_report_max_age", opts.ReportMaxAge.Seconds(), "s")
	metric(t, "s11_all_notready", res.AllNotReady.Seconds(), "s")
	metricCount(t, "s11_removals_by_one_reporter", len(res.Veto.Removed))
	metricCount(t, "s11_alone_removals", len(res.Alone.Removed))
	if len(res.Alone.Removed) > 0 {
		first := time.Duration(1<<63 - 1)
		for _, d := range res.Alone.Removed {
			first = min(first, d)
		}
		metric(t, "s11_alone_notready_to_first_removal", first.Seconds(), "s")
	}

	if res.AllNotReady < 3*opts.PruneGrace {
		t.Errorf("the nodes were NotReady together for %v only, want at least 3x the prune grace %v", res.AllNotReady, opts.PruneGrace)
	}
	// Veto lane: a live session seen by one Ready agent keeps every node.
	if len(res.Veto.Removed) != 0 {
		t.Errorf("%s's report removed %v although %s reports them Established", res.Veto.Reporter, res.Veto.Removed, res.Veto.Contradictor)
	}
	for _, n := range res.Veto.Down {
		if got := res.Veto.Reasons[n]; got != peering.InSessionUp {
			t.Errorf("veto lane: %s published with reason %q, want %s", n, got, peering.InSessionUp)
		}
	}
	// Alone lane: the grace runs from the API's transition, never from
	// the reported time, and the budget caps the leaves.
	for n, d := range res.Alone.Removed {
		if d < opts.PruneGrace {
			t.Errorf("alone lane: %s left %v after its NotReady transition, within the %v grace: the reported BFD time started its clock", n, d, opts.PruneGrace)
		}
		if !strings.Contains(res.Alone.Messages[n], "Dead") {
			t.Errorf("alone lane: %s's removal does not rest on the lone report's quorum (verdict Dead): %q", n, res.Alone.Messages[n])
		}
	}
	if want := min(len(res.Alone.Down), res.Alone.Budget); len(res.Alone.Removed) != want {
		t.Errorf("alone lane: %d of %v left (%v), want %d: all are past the grace, and the budget of the 6-node set is %d",
			len(res.Alone.Removed), res.Alone.Down, res.Alone.Removed, want, res.Alone.Budget)
	}
	for n, r := range res.Alone.Reasons {
		if r != peering.InBudget {
			t.Errorf("alone lane: %s is still in the set with reason %q, want %s", n, r, peering.InBudget)
		}
	}
}

// TestS11SkewedKubeletClock: node-3's kubelet, its clock 10 minutes
// behind, reports its node NotReady (kwok no longer manages it; the
// scenario posts the status and heartbeats), so the Ready condition's
// lastTransitionTime is 10 minutes old when the API first shows it.
// `rebound controller --peering` must count maxUnavailableTime and the
// prune grace from its own first sight: the first action on the critical
// pod (the audit log) and the prune (the watched set) come no earlier than
// those times after the status write (its managedFields time, the API's),
// and they do come.
func TestS11SkewedKubeletClock(t *testing.T) {
	t.Parallel()
	const (
		policyTime = 10 * time.Second
		pruneGrace = 5 * time.Second
		// slack absorbs a loaded machine: a pass, a requeue, an Event.
		slack = 15 * time.Second
		skew  = 10 * time.Minute
	)
	c := startSandbox(t, 5, s7Timings())
	ctx := testContext(t, 5*time.Minute)
	cl := newClient(t, c)
	applyDeployBases(ctx, t, cl)
	applyFiles(ctx, t, cl, false, writePolicy(t, "s11", policyTime))
	startController(t, c, "--kubeconfig", serviceAccountKubeconfig(ctx, t, c, "rebound-system", "rebound"),
		"--peering", "--peering-prune-grace-period", pruneGrace.String())
	config(t, "s11_skew_prune_grace", pruneGrace.Seconds(), "s")
	config(t, "s11_kubelet_clock_skew", skew.Seconds(), "s")

	res, err := scenario.RunS11SkewedKubeletClock(ctx, c, scenario.NewTimeline(testWriter(t)), scenario.S11ClockOptions{
		Workload: scenario.CriticalStandIn("node-3"), Skew: skew,
		PolicyTime: policyTime, PruneGrace: pruneGrace, User: controllerUser,
	})
	if err != nil {
		t.Fatal(err)
	}
	metric(t, "s11_skew_report_to_first_action", res.ActionAfterReport.Seconds(), "s")
	metric(t, "s11_skew_report_to_prune", res.PruneAfterReport.Seconds(), "s")
	t.Logf("first action: %s; the kubelet's NotReady set %d time(s)", res.Action, res.Reports)

	// The scenario holds only if the skewed transition was what the API
	// showed when rebound acted.
	if !res.TransitionAtAction.Equal(res.Transition) || res.ReportedAt.Sub(res.Transition) < skew-2*time.Second {
		t.Fatalf("node-3's transition was %s when rebound acted, written %s and reported at %s: want the kubelet's, %s in the past",
			res.TransitionAtAction, res.Transition, res.ReportedAt, skew)
	}
	// The status write's time is to the second (rounded down) and the
	// audit log's to the microsecond, so a correct controller is never
	// below the bound.
	if res.ActionAfterReport < policyTime {
		t.Errorf("rebound acted (%s) %v after the NotReady report, before maxUnavailableTime %v: it counted from the kubelet's clock", res.Action, res.ActionAfterReport, policyTime)
	}
	if res.ActionAfterReport > policyTime+slack {
		t.Errorf("rebound acted %v after the NotReady report, want within maxUnavailableTime %v + %v", res.ActionAfterReport, policyTime, slack)
	}
	if res.PruneAfterReport < pruneGrace {
		t.Errorf("node-3 left the peer set %v after the NotReady report, within the %v grace: it counted from the kubelet's clock", res.PruneAfterReport, pruneGrace)
	}
	if res.PruneAfterReport > pruneGrace+slack {
		t.Errorf("node-3 left the peer set %v after the NotReady report, want within the grace %v + %v", res.PruneAfterReport, pruneGrace, slack)
	}
}
