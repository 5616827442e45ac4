package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scale"
	"rebound/internal/lab/scenario"
)

// faultTimings give the control plane room to be restarted: a node is
// NotReady only after 40 s without heartbeats, longer than an apiserver or
// etcd restart on a loaded machine, so the fault itself does not take
// every node down. Tolerations of 300 s keep upstream eviction out of the
// rescue.
func faultTimings() sandbox.Timings {
	return sandbox.Timings{NodeMonitorGracePeriod: 40 * time.Second, NodeMonitorPeriod: time.Second, NodeLeaseDuration: 12 * time.Second, DefaultTolerationSeconds: 300}
}

// superviseController runs `rebound controller` and starts it again
// whenever it exits, after a second, as the kubelet restarts a Deployment's
// container. A replica that cannot renew its leader-election lease (the
// apiserver or etcd is away for longer than the renew deadline) exits on
// purpose, so that two replicas never act at once; the restart is what
// brings it back. It returns a function that counts the restarts so far.
func superviseController(t *testing.T, c *sandbox.Cluster) func() int {
	t.Helper()
	var (
		mu       sync.Mutex
		restarts int
		current  *scale.Controller
		stopping bool
	)
	start := func() error {
		p, err := scale.StartController(c, reboundBinary, fmt.Sprintf("rebound-controller-supervised-%d", restarts), "--leader-elect")
		if err == nil {
			current = p
		}
		return err
	}
	if err := start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			mu.Lock()
			p := current
			mu.Unlock()
			p.Wait()
			time.Sleep(time.Second)
			mu.Lock()
			if stopping {
				mu.Unlock()
				return
			}
			restarts++
			err := start()
			mu.Unlock()
			if err != nil {
				t.Errorf("restart rebound controller: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		stopping = true
		p := current
		mu.Unlock()
		p.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() {
			t.Logf("rebound controller log %s:\n%s", p.Log, tail(p.Log, 40))
		}
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return restarts
	}
}

// faultRescue is the rescue every fault test interrupts: n critical
// Deployments on node-3, a policy that rescues one at a time (so the
// fault lands between deletions), and node-3 stopped.
type faultRescue struct {
	c         *sandbox.Cluster
	workloads []scenario.Workload
}

func setUpFaultRescue(ctx context.Context, t *testing.T, c *sandbox.Cluster, n int) *faultRescue {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "serial.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: serial
spec:
  critical:
    namespaces: [kube-system]
    priorityClassNames: [system-cluster-critical]
  maxUnavailableTime: 5s
  limits:
    maxConcurrent: 1
    maxActionsPerMinute: 100
`), 0o644); err != nil {
		t.Fatal(err)
	}
	installRebound(ctx, t, c, policy)
	f := &faultRescue{c: c}
	for i := range n {
		w := scenario.CriticalStandIn("node-3")
		w.Name = "crit-" + string(rune('a'+i))
		if err := w.Create(ctx, c.Client); err != nil {
			t.Fatal(err)
		}
		f.workloads = append(f.workloads, w)
	}
	waitAvailable(ctx, t, c, f.workloads, "node-3")
	return f
}

// strand stops node-3 and waits for rebound's first deletion.
func (f *faultRescue) strand(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := f.c.StopNode(ctx, "node-3"); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		return len(podDeletesBy(t, f.c, sandbox.ReboundUser)) > 0, nil
	})
	if err != nil {
		t.Fatalf("rebound never deleted a pod: %v", err)
	}
}

// complete waits until every workload is available off node-3 again and
// checks the audit log: exactly one deletion per stranded pod.
func (f *faultRescue) complete(ctx context.Context, t *testing.T) []sandbox.AuditEvent {
	t.Helper()
	waitAvailable(ctx, t, f.c, f.workloads, "")
	deletes := podDeletesBy(t, f.c, sandbox.ReboundUser)
	names := sets.New[string]()
	for _, d := range deletes {
		names.Insert(d.ObjectRef.Name)
	}
	metric(t, "fault_total_deletions", float64(len(deletes)), "pods")
	if len(deletes) != len(f.workloads) || names.Len() != len(f.workloads) {
		t.Errorf("rebound deleted %d pods (%d distinct: %v), want exactly %d, one per stranded pod", len(deletes), names.Len(), sets.List(names), len(f.workloads))
	}
	return deletes
}
