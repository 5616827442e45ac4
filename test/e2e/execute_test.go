package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/rescue"
	"rebound/pkg/rescue/execute"
)

// TestExecutorDeleteFromStalePlan replays what a controller does when its
// cache lags behind the API (its watches broke on an etcd or apiserver
// restart): the next pass still sees the pod it just deleted as live and
// plans its delete again. Against the real apiserver, the second delete
// must be refused by the resourceVersion precondition (the pod is
// terminating now, so its version moved on) and leave one delete, not
// two, in the audit log. Without the precondition the apiserver accepts
// the second delete of a terminating pod: the control lane shows that the
// test can fail. A plan whose node is Ready again when the executor
// re-reads it deletes nothing.
func TestExecutorDeleteFromStalePlan(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 2*time.Minute)
	installRebound(ctx, t, c)
	cfg, err := clientcmd.BuildConfigFromFlags("", c.ReboundKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rebound := kubernetes.NewForConfigOrDie(cfg)
	// The ServiceAccount admission plugin wants the namespace's default
	// ServiceAccount, which the controller-manager may not have made yet.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if _, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// The executor deletes only off a node that is not Ready when it
	// re-reads it: a Node no kwok kubelet manages (no heartbeat label)
	// never becomes Ready.
	const downNode = "stale-plan-down"
	down := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: downNode}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, down, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name           string
		node           string
		precondition   bool
		wantFirst      string
		wantSecond     string
		wantAuditedDel int
	}{
		{"with the plan's resourceVersion", downNode, true, rescue.ResultSucceeded, rescue.ResultAlreadyDone, 1},
		{"control: without it", downNode, false, rescue.ResultSucceeded, rescue.ResultSucceeded, 2},
		// The plan saw the node NotReady, but it is Ready now (node-0,
		// heartbeating): no delete at all.
		{"node Ready when re-read", "node-0", true, rescue.ResultRefused, rescue.ResultRefused, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A finalizer keeps the pod terminating after a graceful
			// delete, as a dead node's kubelet does; the toleration keeps
			// the node lifecycle controller's NoExecute taint on the down
			// node from evicting it meanwhile.
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "stale-plan-", Namespace: "default", Finalizers: []string{"rebound.dev/test-hold"}},
				Spec: corev1.PodSpec{NodeName: tc.node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
			}
			pod, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
				if err == nil {
					p.Finalizers = nil
					_, _ = c.Client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
				}
			})
			a := rescue.Action{Kind: rescue.ActionDelete, Namespace: "default", Name: pod.Name, UID: pod.UID, Pod: pod.Name, Node: tc.node}
			if tc.precondition {
				a.ResourceVersion = pod.ResourceVersion
			}
			e := &execute.Executor{Client: rebound, Component: "rebound-test"}
			if o := e.Apply(ctx, a); o.Result != tc.wantFirst {
				t.Fatalf("first delete: %s (%s), want %s", o.Result, o.Detail, tc.wantFirst)
			}
			got, err := c.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if terminating := err == nil && got.DeletionTimestamp != nil; terminating != (tc.wantFirst == rescue.ResultSucceeded) {
				t.Fatalf("after the first delete (%s): pod terminating = %v (%v)", tc.wantFirst, terminating, err)
			}
			// The same action again: what a pass planned from the stale
			// cache would apply.
			o := e.Apply(ctx, a)
			if o.Result != tc.wantSecond {
				t.Errorf("second delete from the stale plan: %s (%s), want %s", o.Result, o.Detail, tc.wantSecond)
			}
			var deletes int
			for _, ev := range podDeletesBy(t, c, sandbox.ReboundUser) {
				if ev.ObjectRef.Name == pod.Name {
					deletes++
				}
			}
			if deletes != tc.wantAuditedDel {
				t.Errorf("audit log: %d successful deletes of %s by rebound, want %d", deletes, pod.Name, tc.wantAuditedDel)
			}
		})
	}
}
