package e2e

import (
	"testing"
	"time"

	"rebound/internal/lab/sandbox"
)

// TestFaultAPIServerRestart restarts kube-apiserver right after rebound's
// first of five deletions. The controller's watches break; if the restart
// outlasts its leader-election renew deadline it exits, as it must, and is
// started again (superviseController). The rescue must complete with no
// deletion repeated.
func TestFaultAPIServerRestart(t *testing.T) {
	testControlPlaneRestart(t, sandbox.APIServer)
}

// TestFaultEtcdRestart does the same with etcd: the apiserver stays up but
// can serve nothing until etcd is back.
func TestFaultEtcdRestart(t *testing.T) {
	testControlPlaneRestart(t, sandbox.Etcd)
}

func testControlPlaneRestart(t *testing.T, component string) {
	c := startSandbox(t, 5, faultTimings())
	ctx := testContext(t, 8*time.Minute)
	f := setUpFaultRescue(ctx, t, c, 5)
	restarts := superviseController(t, c)
	f.strand(ctx, t)

	t0 := time.Now()
	if err := c.RestartComponent(ctx, component, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	metric(t, "fault_"+metricSuffix(component)+"_restart", time.Since(t0).Seconds(), "s")
	f.complete(ctx, t)
	metric(t, "fault_"+metricSuffix(component)+"_controller_restarts", float64(restarts()), "count")
}

func metricSuffix(component string) string {
	out := []byte(component)
	for i, b := range out {
		if b == '-' {
			out[i] = '_'
		}
	}
	return string(out)
}
