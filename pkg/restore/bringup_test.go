package restore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"rebound/pkg/policyfile"
	"rebound/pkg/rescue"
)

// These tests run Bringup's loop against client-go's fake clientset: no
// controller runs, so nothing ever becomes available; what they check is
// what Bringup decides and writes. The e2e test S2 shows the whole story on
// a real control plane.

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// fakeClock advances a second on every read, so that deadlines pass
// without the test sleeping.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

// node is a node in zone a; a NotReady one carries the NoSchedule taint
// kube-controller-manager puts on it at once, which keeps a replacement
// from landing back on it.
func node(name string, ready bool, taints ...corev1.Taint) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
		taints = append(taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule})
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": "a"}},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status,
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute)), LastHeartbeatTime: metav1.NewTime(t0.Add(-2 * time.Minute)),
		}}},
	}
}

func lease(name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: t0.Add(-2 * time.Minute)}},
	}
}

func owned(obj metav1.Object, kind, name string, uid types.UID) {
	obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}})
}

// strandedDeployment: coredns's only pod on the dead node-3, its status
// restored as available.
func strandedDeployment() []runtime.Object {
	d := deployment(1)
	d.UID = "d-coredns"
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-1", UID: "rs-coredns"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1)}, Status: appsv1.ReplicaSetStatus{Replicas: 1, AvailableReplicas: 1}}
	owned(rs, "Deployment", "coredns", d.UID)
	p := pod("coredns-1-abc", "node-3", true)
	p.UID = "pod-coredns"
	owned(p, "ReplicaSet", rs.Name, rs.UID)
	return []runtime.Object{d, rs, p}
}

// strandedStatefulSet: etcd-0 on the dead node-3.
func strandedStatefulSet() []runtime.Object {
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd", UID: "sts-etcd", Generation: 1},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)},
		Status:     appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 1, ReadyReplicas: 1},
	}
	p := pod("etcd-0", "node-3", true)
	p.UID = "pod-etcd-0"
	owned(p, "StatefulSet", "etcd", sts.UID)
	return []runtime.Object{sts, p}
}

// cluster is the restored cluster: node-0 alive (its kubelet renews its
// Lease), node3 as given, its Lease never renewed.
func cluster(node3 *corev1.Node, objs ...runtime.Object) *fake.Clientset {
	base := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		node("node-0", true), node3, lease("node-0"), lease("node-3"),
	}
	client := fake.NewSimpleClientset(append(base, objs...)...)
	renewing(client, "node-0")
	return client
}

// renewing makes the named nodes' kubelets renew their Leases: each list
// of the Leases finds them renewed a second later than the last.
func renewing(client *fake.Clientset, names ...string) {
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		for _, name := range names {
			obj, err := client.Tracker().Get(gvr, corev1.NamespaceNodeLease, name)
			if err != nil {
				continue
			}
			l := obj.(*coordinationv1.Lease).DeepCopy()
			l.Spec.RenewTime = &metav1.MicroTime{Time: l.Spec.RenewTime.Add(time.Second)}
			_ = client.Tracker().Update(gvr, l, corev1.NamespaceNodeLease)
		}
		return false, nil, nil
	})
}

func run(t *testing.T, client *fake.Clientset, opts Options) (*Result, error) {
	t.Helper()
	clock := &fakeClock{now: t0}
	opts.Client = client
	opts.Now = clock.Now
	opts.PollInterval = time.Millisecond
	if opts.Deadline == (Deadline{}) {
		opts.Deadline = Deadline{Base: 30 * time.Second, PerNode: time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Bringup(ctx, opts)
}

func writes(client *fake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" && a.GetResource().Resource != "events" {
			out = append(out, a)
		}
	}
	return out
}

var coredns = WorkloadRef{Namespace: "kube-system", Kind: KindDeployment, Name: "coredns"}

func TestBringupDeletesStrandedPodOnceAndTimesOut(t *testing.T) {
	client := cluster(node("node-3", false), strandedDeployment()...)
	var out strings.Builder
	res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, Progress: &out})
	if err != nil {
		t.Fatal(err)
	}
	// The fake has no ReplicaSet controller: nothing replaces the pod.
	if res.Outcome != OutcomeTimedOut || res.ExitCode != ExitTimeout || ExitCodeOf(res.Err()) != ExitTimeout {
		t.Fatalf("outcome %s exit %d, want TimedOut 3: %s", res.Outcome, res.ExitCode, res.Message)
	}
	if res.DeadlineSeconds != 32 || res.Nodes != 2 {
		t.Errorf("deadline %vs for %d nodes, want 30s + 1s x 2", res.DeadlineSeconds, res.Nodes)
	}
	w := writes(client)
	if len(w) != 1 {
		t.Fatalf("writes = %v, want exactly one delete", w)
	}
	del, ok := w[0].(k8stesting.DeleteAction)
	if !ok || del.GetName() != "coredns-1-abc" || del.GetDeleteOptions().Preconditions == nil ||
		*del.GetDeleteOptions().Preconditions.UID != "pod-coredns" || del.GetDeleteOptions().GracePeriodSeconds != nil {
		t.Errorf("write = %#v, want a graceful delete of coredns-1-abc with its UID as precondition", w[0])
	}
	if len(res.Actions) != 1 || res.Actions[0].Kind != rescue.ActionDelete {
		t.Errorf("actions = %+v", res.Actions)
	}
	events, err := client.CoreV1().Events("kube-system").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(events.Items) != 1 {
		t.Fatalf("events = %v, %v; want one", events, err)
	}
	ev := events.Items[0]
	if ev.Reason != "StrandedPodDeleted" || ev.InvolvedObject.Kind != "Deployment" || ev.InvolvedObject.Name != "coredns" || ev.Related == nil || ev.Related.Name != "coredns-1-abc" || ev.ReportingController != reportingController {
		t.Errorf("event = %+v", ev)
	}
	for _, want := range []string{"zone r/a: Normal", "on NotReady node node-3: Delete", "Delete kube-system/coredns-1-abc: deleted", "bring-up timed out"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBringupRefusesUnfencedStatefulPod(t *testing.T) {
	client := cluster(node("node-3", false), strandedStatefulSet()...)
	sts := WorkloadRef{Namespace: "kube-system", Kind: KindStatefulSet, Name: "etcd"}
	res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{sts}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeRefusedUnsafe || res.ExitCode != ExitUnsafe {
		t.Fatalf("outcome %s exit %d, want RefusedUnsafe 4: %s", res.Outcome, res.ExitCode, res.Message)
	}
	if w := writes(client); len(w) != 0 {
		t.Errorf("writes = %v, want none: a stateful pod is never moved off an unfenced node", w)
	}
	if !strings.Contains(res.Message, "out-of-service") || res.Workloads[0].State != StateRefusedUnsafe {
		t.Errorf("message %q / workloads %+v should say how to fence", res.Message, res.Workloads)
	}
}

func TestBringupForceDeletesStatefulPodOnFencedNode(t *testing.T) {
	fenced := node("node-3", false, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	client := cluster(fenced, strandedStatefulSet()...)
	sts := WorkloadRef{Namespace: "kube-system", Kind: KindStatefulSet, Name: "etcd"}
	res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{sts}}, Deadline: Deadline{Base: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeTimedOut {
		t.Errorf("outcome %s, want TimedOut (no StatefulSet controller in the fake)", res.Outcome)
	}
	w := writes(client)
	if len(w) != 1 {
		t.Fatalf("writes = %v, want one force delete", w)
	}
	del := w[0].(k8stesting.DeleteAction)
	if g := del.GetDeleteOptions().GracePeriodSeconds; del.GetName() != "etcd-0" || g == nil || *g != 0 {
		t.Errorf("write = %#v, want etcd-0 deleted with grace period 0", w[0])
	}
}

func TestBringupDryRunChangesNothing(t *testing.T) {
	client := cluster(node("node-3", false), strandedDeployment()...)
	var out strings.Builder
	res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, DryRun: true, Progress: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeDryRun || res.ExitCode != ExitOK {
		t.Fatalf("outcome %s exit %d", res.Outcome, res.ExitCode)
	}
	if w := writes(client); len(w) != 0 {
		t.Errorf("dry run wrote: %v", w)
	}
	if len(res.Actions) != 1 || !res.Actions[0].DryRun || len(res.Stranded) != 1 {
		t.Errorf("dry run should list the planned delete and the stranded pod: %+v %+v", res.Actions, res.Stranded)
	}
	if !strings.Contains(out.String(), "would Delete, not applied") || !strings.Contains(out.String(), "dry run: nothing is changed") {
		t.Errorf("progress:\n%s", out.String())
	}
}

func TestBringupWaitOnlyNeverActs(t *testing.T) {
	client := cluster(node("node-3", false), strandedDeployment()...)
	res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, WaitOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeTimedOut || len(writes(client)) != 0 {
		t.Errorf("wait only: outcome %s, writes %v", res.Outcome, writes(client))
	}
}

func TestBringupUnknownWorkloadIsBadInput(t *testing.T) {
	client := cluster(node("node-3", false), strandedDeployment()...)
	res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns, {Namespace: "kube-system", Kind: KindDeployment, Name: "corednz"}}}})
	if res != nil || ExitCodeOf(err) != ExitBadInput {
		t.Fatalf("result %v, err %v: want bad input", res, err)
	}
	for _, want := range []string{"Deployment kube-system/corednz not found", "Deployments in kube-system: coredns", "nothing changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if w := writes(client); len(w) != 0 {
		t.Errorf("writes = %v", w)
	}
	if _, err := run(t, client, Options{}); ExitCodeOf(err) != ExitBadInput {
		t.Errorf("no selection: err %v, want bad input", err)
	}
}

func TestBringupPolicySelectsWorkloadsByTemplate(t *testing.T) {
	objs := strandedDeployment()
	d := objs[0].(*appsv1.Deployment)
	d.Spec.Template.Spec.PriorityClassName = "system-cluster-critical"
	other := deployment(1)
	other.Name, other.UID = "web", "d-web"
	client := cluster(node("node-3", false), append(objs, other)...)
	refs, err := Resolve(context.Background(), client, Selection{Policy: policyfile.Default()})
	if err != nil || len(refs) != 1 || refs[0] != coredns {
		t.Fatalf("Resolve(default policy) = %v, %v; want coredns only", refs, err)
	}
	empty := policyfile.Default()
	empty.Spec.Critical.PriorityClassNames = []string{"nothing-has-this"}
	if _, err := Resolve(context.Background(), client, Selection{Policy: empty}); ExitCodeOf(err) != ExitBadInput || !strings.Contains(err.Error(), "selects no") {
		t.Errorf("policy selecting nothing: err %v", err)
	}
}
