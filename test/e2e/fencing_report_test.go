package e2e

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"rebound/api/v1alpha1"
	"rebound/internal/agent/feeder"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// TestFencingReportWriteIsConditional: on the real apiserver, the agent's
// write of its fencing report applies only on the report it read just
// before (server-side apply carrying the resourceVersion, forced or not):
// a write the agent gave up on, arriving after a later one, is refused,
// so a report computed before a disarm can never show "armed" after it.
func TestFencingReportWriteIsConditional(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	c := startSandbox(t, 1, sandbox.FastTimings())
	must(t, scenario.InstallGossipConfinement(ctx, c, "rebound-e2e"))
	dyn, err := dynamic.NewForConfig(c.Config)
	must(t, err)
	w := feeder.APIReports{Client: dyn, Node: "node-0"}
	armed := v1alpha1.FencingReport{ObservedAt: metav1.Now(), Armed: true, WatchdogSeconds: 10, SanctionSeconds: 16, BootID: "b1"}
	// No report yet: created.
	must(t, w.WriteFencing(ctx, armed))
	u, err := dyn.Resource(v1alpha1.PeeringReports).Get(ctx, "node-0", metav1.GetOptions{})
	must(t, err)
	stale := u.GetResourceVersion()
	// The disarmed report is written on the report as it is now.
	disarmed := armed
	disarmed.Armed, disarmed.Reason = false, "the agent stopped"
	must(t, w.WriteFencing(ctx, disarmed))
	// The armed write the agent had abandoned arrives now: refused.
	err = w.WriteFencingAt(ctx, armed, stale)
	if !apierrors.IsConflict(err) {
		t.Fatalf("a write on the stale resourceVersion %s: %v, want a conflict", stale, err)
	}
	got, err := w.ReadFencing(ctx)
	must(t, err)
	if got == nil || got.Armed {
		t.Fatalf("the report after the late write = %+v, want the disarmed one", got)
	}
	// So is a write on any earlier version.
	if err := w.WriteFencingAt(ctx, armed, "1"); !apierrors.IsConflict(err) {
		t.Fatalf("a write on resourceVersion 1: %v, want a conflict", err)
	}
}
