package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/rescue/execute"
)

// TestS3OneRescueOneDelete: one rescue, one delete. A 0 s policy acts at
// the NotReady flip; the node's kubelet stops while its host answers (kwok
// stops heartbeating it, no agents: no early verdict); each critical
// Deployment prefers the node it runs on (preferred node affinity, weight
// 100), so a replacement created before kube-controller-manager's
// NoSchedule taint is on the node goes straight back to it. Three rounds,
// one node after another, each must cost exactly one delete and never see
// a replacement bound to the NotReady node. A fourth lane's pod tolerates
// every taint (operator Exists, no key): no taint can keep its
// replacement off, so rebound deletes it at most once and then holds,
// saying why.
func TestS3OneRescueOneDelete(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	// Upstream's taint eviction stays out of the test.
	timings.DefaultTolerationSeconds = 300
	c := startSandbox(t, 6, timings)
	ctx := testContext(t, 12*time.Minute)
	policy := filepath.Join(t.TempDir(), "zero.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: zero
spec:
  critical:
    namespaces: [kube-system]
    priorityClassNames: [system-cluster-critical]
  maxUnavailableTime: 0s
  actions: [DeleteAndReplace]
  limits:
    maxConcurrent: 10
    maxActionsPerMinute: 100
`), 0o644); err != nil {
		t.Fatal(err)
	}
	installRebound(ctx, t, c, policy)
	config(t, "s3_one_delete_max_unavailable_time", 0, "s")
	config(t, "s3_one_delete_rounds", 3, "count")

	// Each workload may run on its own node and on node-0 and node-5,
	// which stay up: a replacement never lands on the node of a later
	// round, so each round is one rescue.
	rounds := []scenario.Workload{}
	for i, node := range []string{"node-1", "node-2", "node-3"} {
		w := scenario.CriticalStandIn(node)
		w.Name = fmt.Sprintf("one-delete-%c", 'a'+i)
		w.AllowedNodes = []string{node, "node-0", "node-5"}
		rounds = append(rounds, w)
	}
	all := scenario.CriticalStandIn("node-4")
	all.Name = "tolerate-all"
	all.AllowedNodes = []string{"node-4", "node-0", "node-5"}
	for _, w := range append(append([]scenario.Workload{}, rounds...), all) {
		if err := w.Create(ctx, c.Client); err != nil {
			t.Fatal(err)
		}
	}
	// The toleration every taint matches; the rollout puts the pod back
	// on its preferred node.
	patch := []byte(`{"spec":{"template":{"spec":{"tolerations":[{"operator":"Exists"}]}}}}`)
	if _, err := c.Client.AppsV1().Deployments(all.Namespace).Patch(ctx, all.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range append(append([]scenario.Workload{}, rounds...), all) {
		waitAvailable(ctx, t, c, []scenario.Workload{w}, w.PreferNode)
	}
	bindings := watchBindings(ctx, t, c)
	startController(t, c)

	// The tolerate-all lane dies with the first round and runs through
	// the other two, long enough for a delete loop to show.
	if err := c.StopNode(ctx, all.PreferNode); err != nil {
		t.Fatal(err)
	}
	for _, w := range rounds {
		if err := c.StopNode(ctx, w.PreferNode); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		if err := waitReadyOff(ctx, c, w, 2*time.Minute); err != nil {
			// Count the deletes all the same: a delete loop elsewhere
			// (one that uses up maxConcurrent) is what stalls a round.
			t.Error(err)
			continue
		}
		t.Logf("%s: a Ready replacement off %s %.1fs after its heartbeat stopped", w, w.PreferNode, time.Since(stopped).Seconds())
	}

	deletes := podDeletesBy(t, c, sandbox.ReboundUser)
	perWorkload := map[string]int{}
	for _, d := range deletes {
		for _, w := range append(append([]scenario.Workload{}, rounds...), all) {
			if d.ObjectRef.Namespace == w.Namespace && strings.HasPrefix(d.ObjectRef.Name, w.Name+"-") {
				perWorkload[w.Name]++
			}
		}
	}
	worst := 0
	for _, w := range rounds {
		n := perWorkload[w.Name]
		worst = max(worst, n)
		if n != 1 {
			t.Errorf("%s: rebound deleted %d pods for one rescue, want exactly 1", w, n)
		}
		if b := bindings.boundTo(w.Name, w.PreferNode); len(b) > 0 {
			t.Errorf("%s: replacements bound to NotReady %s: %v; want none", w, w.PreferNode, b)
		}
	}
	metricCount(t, "rescue_deletes_per_pod", worst)

	// The tolerate-all lane: at most one delete; a replacement back on the
	// NotReady node is held, with an Event that says why.
	n := perWorkload[all.Name]
	metricCount(t, "rescue_deletes_tolerate_all", n)
	if n > 1 {
		t.Errorf("%s: rebound deleted %d pods, want at most 1 (no taint can keep its replacement off %s)", all, n, all.PreferNode)
	}
	back := bindings.boundTo(all.Name, all.PreferNode)
	t.Logf("%s: replacements bound back to NotReady %s: %v", all, all.PreferNode, back)
	if len(back) > 0 {
		held, err := heldEvent(ctx, c, all, "at most once per incident", time.Minute)
		if err != nil {
			t.Errorf("%s: its replacement went back to NotReady %s, and no %s Event says it is held: %v", all, all.PreferNode, execute.ReasonHeld, err)
		} else {
			t.Logf("%s: %s", all, held)
		}
	}
	metricCount(t, "rescue_tolerate_all_bound_back", len(back))
}

// bindings records, from a pod watch that starts before the first node
// stops, every pod of kube-system with the node it was bound to; before
// are the pods the watch found when it started.
type bindings struct {
	mu     sync.Mutex
	bound  map[string]string // pod name -> node
	before map[string]bool
}

func watchBindings(ctx context.Context, t *testing.T, c *sandbox.Cluster) *bindings {
	t.Helper()
	b := &bindings{bound: map[string]string{}, before: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace("kube-system"))
	inf := f.Core().V1().Pods().Informer()
	record := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			b.mu.Lock()
			b.bound[p.Name] = p.Spec.NodeName
			b.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod watch never synced")
	}
	for _, key := range inf.GetStore().ListKeys() {
		b.before[strings.TrimPrefix(key, "kube-system/")] = true
	}
	return b
}

// boundTo lists the pods of workload name bound to node since the watch
// started: replacements.
func (b *bindings) boundTo(name, node string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for pod, n := range b.bound {
		if n == node && strings.HasPrefix(pod, name+"-") && !b.before[pod] {
			out = append(out, pod)
		}
	}
	return out
}

// waitReadyOff waits until a pod of w that is not terminating is Ready on a
// node other than the one it preferred.
func waitReadyOff(ctx context.Context, c *sandbox.Cluster, w scenario.Workload, timeout time.Duration) error {
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
		if err != nil {
			return false, nil
		}
		last = podSummaries(pods.Items)
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || p.Spec.NodeName == w.PreferNode {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s: no Ready pod off %s: %v (pods: %v)", w, w.PreferNode, err, last)
	}
	return nil
}

// heldEvent waits for rebound's Held Event about w whose message contains
// words, and returns its message.
func heldEvent(ctx context.Context, c *sandbox.Cluster, w scenario.Workload, words string, timeout time.Duration) (string, error) {
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(w.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == execute.ReasonHeld && strings.Contains(e.Message, w.Name+"-") && strings.Contains(e.Message, words) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg, err
}
