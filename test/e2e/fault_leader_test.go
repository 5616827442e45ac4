package e2e

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/sandbox"
)

// leaseDuration is controller-runtime's default leader-election lease,
// which `rebound controller --leader-elect` uses.
const leaseDuration = 15 * time.Second

// TestFaultLeaderFailover runs two replicas of `rebound controller` with
// leader election and SIGKILLs the leader right after its first of five
// deletions (no clean release of the lease). The other replica must take
// over within the lease duration plus a pass, and complete the rescue; the
// apiserver's audit log must show exactly five deletions by rebound.
func TestFaultLeaderFailover(t *testing.T) {
	c := startSandbox(t, 5, faultTimings())
	ctx := testContext(t, 8*time.Minute)
	f := setUpFaultRescue(ctx, t, c, 5)
	// The second replica starts once the first holds the Lease, so that
	// it must say, once, whose Lease it waits for.
	first := startController(t, c)
	var holder string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases("rebound-system").Get(ctx, "rebound-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil //nolint:nilerr // not created or not held yet
		}
		holder = *l.Spec.HolderIdentity
		return holder != "", nil
	})
	if err != nil {
		t.Fatalf("the first replica never took the leader-election Lease (log %s): %v", first.log, err)
	}
	replicas := []*controllerProcess{first, startController(t, c)}
	f.strand(ctx, t)

	// The leader is the replica that acted: its log has the action.
	var leader, other *controllerProcess
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for i, p := range replicas {
			data, _ := os.ReadFile(p.log)
			if strings.Contains(string(data), "rescue action") {
				leader, other = p, replicas[1-i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no replica logged its deletion: %v", err)
	}
	if leader != first {
		t.Errorf("the replica that acted is not the one that held the Lease first (%s)", holder)
	}
	if data, _ := os.ReadFile(other.log); !strings.Contains(string(data), "waiting for the leader-election Lease, held by "+holder) {
		t.Errorf("the waiting replica did not say whose Lease it waits for (%s); log %s:\n%s", holder, other.log, tail(other.log, 20))
	}
	leader.stop(syscall.SIGKILL)
	killedAt := time.Now()
	before := len(podDeletesBy(t, c, sandbox.ReboundUser))
	metric(t, "failover_deletions_before_kill", float64(before), "pods")

	// Takeover: the other replica's first deletion.
	var takeover time.Duration
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, leaseDuration+time.Minute, true, func(context.Context) (bool, error) {
		for _, d := range podDeletesBy(t, c, sandbox.ReboundUser)[before:] {
			takeover = d.StageTimestamp.Sub(killedAt)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the second replica never deleted a pod after the leader died (log %s): %v", other.log, err)
	}
	metric(t, "failover_takeover", takeover.Seconds(), "s")
	// A lease duration, a retry period (2 s), a pass and the replacement of
	// the first rescued pod (maxConcurrent 1), with slack for the machine.
	if bound := leaseDuration + 15*time.Second; takeover > bound {
		t.Errorf("takeover took %s after the leader was killed, want under %s", takeover.Round(100*time.Millisecond), bound)
	}
	f.complete(ctx, t)
}
