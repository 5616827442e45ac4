package execute

import (
	"context"
	coordinationv1 "k8s.io/api/coordination/v1"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"rebound/pkg/fencing"
	"rebound/pkg/rescue"
)

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func deployment(replicas, available int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns", UID: "d-1", ResourceVersion: "7"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
		Status:     appsv1.DeploymentStatus{AvailableReplicas: available},
	}
}

func TestScaleBounce(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset(deployment(3, 0))
	e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test", Now: func() time.Time { return t0 }}
	down := rescue.Action{Kind: rescue.ActionScaleDown, Namespace: "kube-system", Name: "coredns", UID: "d-1", ResourceVersion: "7", Replicas: 3, Incident: t0}
	if o := e.Apply(ctx, down); !o.Applied() || o.Err != nil {
		t.Fatalf("scale down: %+v", o)
	}
	got, _ := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if *got.Spec.Replicas != 0 || got.Annotations[rescue.ScaleBounceAnnotation] != "3" || got.Annotations[rescue.ScaleBouncedForAnnotation] != "2026-07-01T12:00:00Z" {
		t.Fatalf("after scale down: replicas %d, annotations %v", *got.Spec.Replicas, got.Annotations)
	}
	// The write is an Update of the object read from the API: it carries
	// the resourceVersion the API server compares.
	var update k8stesting.UpdateAction
	for _, a := range client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok {
			update = u
		}
	}
	if update == nil || update.GetObject().(*appsv1.Deployment).ResourceVersion != "7" {
		t.Errorf("scale down was not an Update carrying resourceVersion 7: %v", client.Actions())
	}
	// A plan made from an older version is stale: nothing happens. (The
	// fake clientset does not bump resourceVersion, so the test does.)
	stale := down
	stale.ResourceVersion = "6"
	if o := e.Apply(ctx, stale); o.Result != rescue.ResultAlreadyDone || !strings.Contains(o.Detail, "changed since the plan") {
		t.Errorf("stale scale down: %+v", o)
	}
	// The same plan again: the Deployment itself says it was bounced for
	// this incident.
	if o := e.Apply(ctx, down); o.Result != rescue.ResultRefused || !strings.Contains(o.Detail, "already scale-bounced once for this incident") {
		t.Errorf("second scale down: %+v", o)
	}
	restore := rescue.Action{Kind: rescue.ActionScaleRestore, Namespace: "kube-system", Name: "coredns", UID: "d-1", ResourceVersion: "7", Replicas: 3}
	if o := e.Apply(ctx, restore); !o.Applied() {
		t.Fatalf("scale restore: %+v", o)
	}
	got, _ = client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if *got.Spec.Replicas != 3 || got.Annotations[rescue.ScaleBounceAnnotation] != "" || got.Annotations[rescue.ScaleBouncedForAnnotation] == "" {
		t.Errorf("after restore: replicas %d, annotations %v", *got.Spec.Replicas, got.Annotations)
	}
	if o := e.Apply(ctx, restore); o.Result != rescue.ResultAlreadyDone || o.Detail != "already restored" {
		t.Errorf("second restore: %+v", o)
	}
	wrongUID := down
	wrongUID.UID = "d-2"
	if o := e.Apply(ctx, wrongUID); o.Result != rescue.ResultAlreadyDone || !strings.Contains(o.Detail, "recreated") {
		t.Errorf("other UID: %+v", o)
	}
	if o := e.Apply(ctx, rescue.Action{Kind: rescue.ActionDelete, Namespace: "kube-system", Name: "gone", UID: "x", Node: "node-3"}); o.Result != rescue.ResultAlreadyDone || o.Detail != "already gone" {
		t.Errorf("delete of a missing pod: %+v", o)
	}
}

func TestScaleDownRefusedWhenAReplicaIsAvailable(t *testing.T) {
	client := fake.NewSimpleClientset(deployment(2, 1))
	e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test"}
	down := rescue.Action{Kind: rescue.ActionScaleDown, Namespace: "kube-system", Name: "coredns", UID: "d-1", ResourceVersion: "7", Replicas: 2, Incident: t0}
	if o := e.Apply(context.Background(), down); o.Result != rescue.ResultRefused {
		t.Errorf("scale down with a replica available: %+v", o)
	}
}

var fenced = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

// testNode is node-3 with its Ready condition (ready: True, else
// Unknown, as the node lifecycle controller sets it) and taints.
func testNode(ready bool, taints ...corev1.Taint) *corev1.Node {
	status := corev1.ConditionUnknown
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-3"},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
}

func booted(n *corev1.Node, boot string) *corev1.Node {
	n.Status.NodeInfo.BootID = boot
	return n
}

func annotated(n *corev1.Node, key, value string) *corev1.Node {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[key] = value
	return n
}

// TestDeleteRereadsNode: the planner saw the node NotReady (for a force
// delete, also fenced), maybe in a stale cache or in a status restored
// from a backup; the executor deletes only if the API says so now. A node
// that is Ready again refuses every delete; a force delete also needs the
// out-of-service taint with effect NoExecute.
func TestDeleteRereadsNode(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-0", UID: "p-1"}, Spec: corev1.PodSpec{NodeName: "node-3"}}
	graceful := rescue.Action{Kind: rescue.ActionDelete, Namespace: "kube-system", Name: "etcd-0", UID: "p-1", Pod: "etcd-0", Node: "node-3"}
	force := graceful
	force.Kind = rescue.ActionForceDelete
	outOfServiceNoSchedule := corev1.Taint{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoSchedule}
	// A delete planned on the taint that keeps the replacement off the
	// node refuses when the node lost it meanwhile.
	unreachableNoSchedule := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	keptOff := graceful
	keptOff.KeepsOff = &unreachableNoSchedule
	cordoned := graceful
	cordoned.KeepsOff = &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name   string
		action rescue.Action
		node   *corev1.Node // nil: gone from the API
		want   string
		detail string
	}{
		{"force: taint removed since the plan", force, testNode(false), rescue.ResultRefused, "is not fenced"},
		{"force: out-of-service NoSchedule only", force, testNode(false, outOfServiceNoSchedule), rescue.ResultRefused, "is not fenced"},
		{"force: rebound's own taint, not verified by its re-read", force, annotated(testNode(false, fenced), fencing.AnnotationFencedBoot, "b1"), rescue.ResultRefused, "is not fenced"},
		{"force: rebound's own taint, verified", force, booted(annotated(annotated(testNode(false, fenced), fencing.AnnotationFencedBoot, "b1"), fencing.AnnotationVerified, "node-3-1"), "b1"), rescue.ResultSucceeded, "force-deleted"},
		{"force: fenced", force, testNode(false, fenced), rescue.ResultSucceeded, "force-deleted"},
		{"force: fenced but Ready again", force, testNode(true, fenced), rescue.ResultRefused, "is Ready again"},
		{"force: node gone", force, nil, rescue.ResultRefused, "gone from the API"},
		{"graceful: NotReady", graceful, testNode(false), rescue.ResultSucceeded, "deleted"},
		{"graceful: Ready again since the plan", graceful, testNode(true), rescue.ResultRefused, "is Ready again"},
		{"graceful: Ready again, fenced", graceful, testNode(true, fenced), rescue.ResultRefused, "is Ready again"},
		{"graceful: node gone", graceful, nil, rescue.ResultSucceeded, "deleted"},
		{"graceful, planned on the NoSchedule taint: still there", keptOff, testNode(false, unreachableNoSchedule), rescue.ResultSucceeded, "deleted"},
		{"graceful, planned on the NoSchedule taint: gone since", keptOff, testNode(false), rescue.ResultRefused, "no longer carries the taint node.kubernetes.io/unreachable:NoSchedule"},
		{"graceful, planned on a cordon: uncordoned since", cordoned, testNode(false), rescue.ResultRefused, "no longer carries its cordon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{pod.DeepCopy()}
			if tc.node != nil {
				objs = append(objs, tc.node)
			}
			client := fake.NewSimpleClientset(objs...)
			e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test"}
			o := e.Apply(context.Background(), tc.action)
			if o.Result != tc.want || !strings.Contains(o.Detail, tc.detail) {
				t.Fatalf("outcome %+v, want %s with %q", o, tc.want, tc.detail)
			}
			_, err := client.CoreV1().Pods("kube-system").Get(context.Background(), "etcd-0", metav1.GetOptions{})
			if deleted := err != nil; deleted != (tc.want == rescue.ResultSucceeded) {
				t.Errorf("pod deleted = %v", deleted)
			}
			var readNode bool
			for _, act := range client.Actions() {
				if act.GetVerb() == "get" && act.GetResource().Resource == "nodes" {
					readNode = true
				}
			}
			if !readNode {
				t.Error("the node was not re-read from the API")
			}
		})
	}
}

// TestDeleteWithoutNodeIsRefused: an action that names no node cannot be
// checked against the API, so it deletes nothing.
func TestDeleteWithoutNodeIsRefused(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-x", UID: "p-1"}}
	for _, kind := range []rescue.ActionKind{rescue.ActionDelete, rescue.ActionForceDelete} {
		client := fake.NewSimpleClientset(pod.DeepCopy())
		e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test"}
		o := e.Apply(context.Background(), rescue.Action{Kind: kind, Namespace: "kube-system", Name: "coredns-x", UID: "p-1"})
		if o.Result != rescue.ResultRefused {
			t.Errorf("%s without a node: %+v, want Refused", kind, o)
		}
		if _, err := client.CoreV1().Pods("kube-system").Get(context.Background(), "coredns-x", metav1.GetOptions{}); err != nil {
			t.Errorf("%s without a node deleted the pod", kind)
		}
	}
}

// TestEventTimestamps: Events carry eventTime, firstTimestamp and
// lastTimestamp, so that `kubectl get events --sort-by` orders them, and
// regard the workload with the pod as related object.
func TestEventTimestamps(t *testing.T) {
	client := fake.NewSimpleClientset()
	e := &Executor{Client: client, Component: "rebound.dev/test", Now: func() time.Time { return t0 }}
	a := rescue.Action{Kind: rescue.ActionDelete, Namespace: "kube-system", Name: "coredns-x", UID: "p-1", Pod: "coredns-x", Reason: strings.Repeat("r", 2000)}
	w := rescue.Workload{Kind: "Deployment", Name: "coredns", UID: "d-1"}
	if err := e.RecordOutcome(context.Background(), a, w, Outcome{Result: rescue.ResultSucceeded}); err != nil {
		t.Fatal(err)
	}
	evs, _ := client.CoreV1().Events("kube-system").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 {
		t.Fatalf("events = %d, want 1", len(evs.Items))
	}
	ev := evs.Items[0]
	if !ev.LastTimestamp.Time.Equal(t0) || !ev.FirstTimestamp.Time.Equal(t0) || !ev.EventTime.Time.Equal(t0) || ev.Count != 1 {
		t.Errorf("timestamps: first %v last %v eventTime %v count %d", ev.FirstTimestamp, ev.LastTimestamp, ev.EventTime, ev.Count)
	}
	if ev.InvolvedObject.Kind != "Deployment" || ev.InvolvedObject.UID != "d-1" || ev.Related == nil || ev.Related.Name != "coredns-x" ||
		ev.Reason != "StrandedPodDeleted" || ev.Action != "Delete" || ev.ReportingController != "rebound.dev/test" || ev.ReportingInstance == "" ||
		len(ev.Message) > noteMax {
		t.Errorf("event = %+v", ev)
	}
	if o := (Outcome{Result: rescue.ResultAlreadyDone}); e.RecordOutcome(context.Background(), a, w, o) != nil {
		t.Error("AlreadyDone must record nothing")
	}
	if evs, _ := client.CoreV1().Events("kube-system").List(context.Background(), metav1.ListOptions{}); len(evs.Items) != 1 {
		t.Errorf("AlreadyDone recorded an Event")
	}
}

// TestDeleteRereadsLease: a delete planned with the node's Lease renewTime
// re-reads the Lease. At a stall's end the Lease comes back before the
// Ready flag: a renewal since the plan, whatever time the kubelet's clock
// wrote, refuses the delete though the node is still NotReady.
func TestDeleteRereadsLease(t *testing.T) {
	planned := time.Date(2026, 3, 1, 11, 59, 40, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-x", UID: "p-1"}, Spec: corev1.PodSpec{NodeName: "node-3"}}
	a := rescue.Action{Kind: rescue.ActionDelete, Namespace: "kube-system", Name: "coredns-x", UID: "p-1", Pod: "coredns-x", Node: "node-3", LeaseRenewTime: &planned}
	for _, tc := range []struct {
		name   string
		renew  *time.Time // nil: no Lease
		want   string
		detail string
	}{
		{"Lease as the plan read it", &planned, rescue.ResultSucceeded, "deleted"},
		{"Lease renewed since", ptr.To(planned.Add(10 * time.Second)), rescue.ResultRefused, "was renewed since the plan"},
		{"Lease renewed since, to an older time (a kubelet clock behind)", ptr.To(planned.Add(-time.Hour)), rescue.ResultRefused, "was renewed since the plan"},
		{"Lease gone", nil, rescue.ResultRefused, "is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{pod.DeepCopy(), testNode(false)}
			if tc.renew != nil {
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "node-3"},
					Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: *tc.renew}}})
			}
			client := fake.NewSimpleClientset(objs...)
			e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test"}
			o := e.Apply(context.Background(), a)
			if o.Result != tc.want || !strings.Contains(o.Detail, tc.detail) {
				t.Fatalf("outcome %+v, want %s with %q", o, tc.want, tc.detail)
			}
			_, err := client.CoreV1().Pods("kube-system").Get(context.Background(), "coredns-x", metav1.GetOptions{})
			if deleted := err != nil; deleted != (tc.want == rescue.ResultSucceeded) {
				t.Errorf("pod deleted = %v", deleted)
			}
		})
	}
}
