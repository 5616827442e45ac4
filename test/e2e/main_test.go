// Package e2e plays the design's scenarios against a real control plane
// (the sandbox) and, for BGP, real BIRD daemons. Each test is named after
// its scenario id so it can run alone: go test ./test/e2e -run TestS1.
//
// Measured figures are printed as "METRIC <name>=<value> <unit>" lines,
// settings as "CONFIG" lines (internal/lab/report).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"rebound/internal/lab/report"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/logging"
)

var binaries sandbox.Binaries

func TestMain(m *testing.M) {
	// As cmd/rebound does: the controller-runtime clients of the tests
	// log through it, not through a stack trace.
	logging.Install(os.Stderr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	var err error
	binaries, err = sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Progress: os.Stderr})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cannot get the sandbox binaries:", err)
		os.Exit(1)
	}
	// hack/test-versions.sh reads this line to label its table.
	fmt.Fprintf(os.Stderr, "e2e: sandbox Kubernetes %s (%s)\n", binaries.Kubernetes, binaries.Dir)
	if reboundBinary, err = buildRebound(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(filepath.Dir(reboundBinary))
	os.Exit(code)
}

// startSandbox starts a sandbox for one test and stops it when the test
// ends. On failure it prints where the component logs are; they stay in
// the test's temporary folder until the run ends.
func startSandbox(t *testing.T, nodes int, timings sandbox.Timings) *sandbox.Cluster {
	t.Helper()
	c, err := newSandbox(t, nodes, timings)
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	return c
}

// startPair starts the two sandboxes of a scenario's lanes at the same
// time and returns them with a timeline each (printed with -v, each line
// naming its lane).
func startPair(t *testing.T, nodes int, timings sandbox.Timings) scenario.Pair {
	t.Helper()
	var cs [2]*sandbox.Cluster
	var errs [2]error
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[i], errs[i] = newSandbox(t, nodes, timings)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatalf("start sandboxes: %v", err)
	}
	return scenario.Pair{
		Without: cs[0], With: cs[1],
		WithoutTimeline: scenario.NewTimeline(laneWriter(t, scenario.LaneWithout)),
		WithTimeline:    scenario.NewTimeline(laneWriter(t, scenario.LaneWith)),
	}
}

// newSandbox starts a sandbox and registers its stop; safe to call from
// several goroutines of one test.
func newSandbox(t *testing.T, nodes int, timings sandbox.Timings) (*sandbox.Cluster, error) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	c, err := sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: binaries, Nodes: nodes, Timings: timings})
	if err != nil {
		var ce *sandbox.ComponentError
		if errors.As(err, &ce) {
			err = fmt.Errorf("%w\n%s", err, ce.LogTail)
		}
		return nil, err
	}
	metric(t, "sandbox_start_"+fmt.Sprint(nodes)+"_nodes", time.Since(t0).Seconds(), "s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs: %s/logs", c.Dir)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop sandbox: %v", err)
		}
	})
	return c, nil
}

// results writes the tests' METRIC and CONFIG lines to stdout, where
// tools collect them; an invalid line fails the test that wrote it.
func results(t *testing.T, write func(*report.Writer)) {
	t.Helper()
	w := report.NewWriter(os.Stdout)
	write(w)
	if err := w.Err(); err != nil {
		t.Error(err)
	}
}

// metric prints a measured figure.
func metric(t *testing.T, name string, value float64, unit string) {
	t.Helper()
	results(t, func(w *report.Writer) { w.Metric(name, value, unit) })
}

// metricCount prints a measured count.
func metricCount(t *testing.T, name string, n int) {
	t.Helper()
	results(t, func(w *report.Writer) { w.Count(name, n) })
}

// config prints a setting the test played with.
func config(t *testing.T, name string, value float64, unit string) {
	t.Helper()
	results(t, func(w *report.Writer) { w.Config(name, value, unit) })
}

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
