package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"rebound/internal/lab/sandbox"
)

// TestControllerPreflightAsAUser runs the built `rebound controller` the
// way a new user does, against a cluster that lacks what it needs: each
// time it must stop at once with one clear error that says what to apply,
// instead of controller-runtime's error repeated every 10 s (and /readyz
// saying ready meanwhile), and print no library stack trace.
func TestControllerPreflightAsAUser(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	run := func(what string, args ...string) cliRun {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		start := time.Now()
		r := runCLI(rctx, t, reboundBinary, append([]string{"controller", "--kubeconfig", c.Kubeconfig,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, args...)...)
		if rctx.Err() != nil {
			t.Fatalf("%s: the controller was still running after %s; want it to stop with an error\nstderr:\n%s", what, time.Since(start), r.stderr)
		}
		t.Logf("%s: exit %d after %s\n%s", what, r.code, time.Since(start).Round(time.Millisecond), r.stderr)
		for _, bad := range []string{"should be installed", "goroutine ", "log.SetLogger(...) was never called"} {
			if strings.Contains(r.stderr, bad) {
				t.Errorf("%s: output has %q:\n%s", what, bad, r.stderr)
			}
		}
		return r
	}

	r := run("no CRD")
	r.expect(t, "controller without the RecoveryPolicy CRD", 1, "RecoveryPolicy CRD", "is not installed", "deploy/crd")

	cl := newClient(t, c)
	applyFiles(ctx, t, cl, false, repoPath("deploy/crd/rebound.dev_recoverypolicies.yaml"))
	waitCRDEstablished(ctx, t, cl, "recoverypolicies.rebound.dev")
	r = run("--peering without the namespace", "--peering")
	r.expect(t, "controller --peering without namespace rebound-system", 1, "namespace rebound-system does not exist", "deploy/controller/namespace.yaml")
}
