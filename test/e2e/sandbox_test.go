package e2e

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"rebound/internal/lab/sandbox"
)

// TestSandboxStartFailureNamesComponent: a component that cannot start gives
// an error naming it, with the tail of its log, and nothing is left running.
func TestSandboxStartFailureNamesComponent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	_, err := sandbox.Start(ctx, sandbox.Options{
		Dir:       dir,
		Binaries:  binaries,
		Nodes:     1,
		Timings:   sandbox.FastTimings(),
		ExtraArgs: map[string][]string{sandbox.ControllerManager: {"--no-such-flag=1"}},
	})
	var ce *sandbox.ComponentError
	if !errors.As(err, &ce) {
		t.Fatalf("Start error = %v, want a *sandbox.ComponentError", err)
	}
	if ce.Component != sandbox.ControllerManager {
		t.Errorf("failed component = %q, want %q", ce.Component, sandbox.ControllerManager)
	}
	if !strings.Contains(ce.LogTail, "no-such-flag") {
		t.Errorf("log tail does not show the cause:\n%s", ce.LogTail)
	}
	if !strings.Contains(err.Error(), "kube-controller-manager") || !strings.Contains(err.Error(), "last lines of") {
		t.Errorf("error text lacks the component or the log tail: %v", err)
	}
	// etcd and the apiserver had started; Start must have stopped them.
	if _, err := os.Stat(dir + "/state.json"); !os.IsNotExist(err) {
		t.Errorf("state.json left behind after a failed start (err=%v)", err)
	}
	for _, bin := range []string{binaries.Etcd, binaries.APIServer} {
		if pids := pidsOf(t, bin, dir); len(pids) > 0 {
			t.Errorf("%s still running after failed start: pids %v", bin, pids)
		}
	}
}

// TestSandboxNodeStopAndStart: a stopped node goes NotReady after the grace
// period and is Ready again soon after it is started.
func TestSandboxNodeStopAndStart(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 2, sandbox.FastTimings())
	ctx := testContext(t, 2*time.Minute)
	// The release the apiserver reports is the one built, and `sandbox
	// status` finds it again.
	if c.Kubernetes == "" || c.Kubernetes != binaries.Kubernetes {
		t.Errorf("the apiserver reports Kubernetes %q, the binaries were built as %q", c.Kubernetes, binaries.Kubernetes)
	}
	if a, err := sandbox.Attach(c.Dir); err != nil {
		t.Errorf("Attach(%s): %v", c.Dir, err)
	} else if a.Kubernetes != c.Kubernetes {
		t.Errorf("Attach(%s): Kubernetes %q, want %q", c.Dir, a.Kubernetes, c.Kubernetes)
	}
	if err := c.StopNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := c.WaitNodeReady(ctx, "node-1", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	metric(t, "sandbox_node_notready_after_stop", time.Since(t0).Seconds(), "s")
	if err := c.WaitNodeReady(ctx, "node-0", true, time.Second); err != nil {
		t.Errorf("node-0 should stay Ready: %v", err)
	}
	if err := c.StartNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := c.WaitNodeReady(ctx, "node-1", true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	metric(t, "sandbox_node_ready_after_start", time.Since(t0).Seconds(), "s")
	if err := c.StopNode(ctx, "node-9"); err == nil || !strings.Contains(err.Error(), "node-9") {
		t.Errorf("StopNode of an unknown node: err = %v, want one naming node-9", err)
	}
}

// pidsOf lists processes running bin with an argument under dir.
func pidsOf(t *testing.T, bin, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil || exe != bin {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(cmdline), dir) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
