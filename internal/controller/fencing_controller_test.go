package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
)

type fencingFixture struct {
	r       *FencingReconciler
	api     *kfake.Clientset
	reports client.Client
	clock   *tickingClock
	verdict map[string]liveness.NodeVerdict
}

var fencingMembers = []string{"node-0", "node-1", "node-2", "node-3"}

func fencingNode(name, boot string, ready bool) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: boot},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
}

func fencingReport(name string, armed bool, ts ...v1alpha1.FencingTestimony) *v1alpha1.PeeringReport {
	r := &v1alpha1.PeeringReport{ObjectMeta: metav1.ObjectMeta{Name: name}, Fencing: &v1alpha1.FencingReport{
		Armed: armed, WatchdogSeconds: 10, SanctionSeconds: 16, BootID: name + "-b1",
		Lists: []v1alpha1.MemberList{{Number: 1, Members: fencingMembers}}, Testimonies: ts}}
	return r
}

func newFencingFixture(t *testing.T, armed bool) *fencingFixture {
	t.Helper()
	f := &fencingFixture{clock: &tickingClock{t: now}, verdict: map[string]liveness.NodeVerdict{}}
	var objs []runtime.Object
	var reports []client.Object
	for _, n := range fencingMembers {
		objs = append(objs, fencingNode(n, n+"-b1", n != "node-3"),
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: n}})
		reports = append(reports, fencingReport(n, n != "node-3" || armed))
		f.verdict[n] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: now}
	}
	f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: now}
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db-0", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: corev1.PodSpec{NodeName: "node-3"}},
		// A node agent's DaemonSet pod tolerates every taint: the
		// out-of-service taint never evicts it, and on the node's next
		// boot its kubelet runs the same pod again. It never blocks the
		// taint's removal.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "agent-node-3", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec: corev1.PodSpec{NodeName: "node-3", Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}})
	f.api = kfake.NewSimpleClientset(objs...)
	f.reports = fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(reports...).Build()
	var cacheObjs []client.Object
	for _, n := range fencingMembers {
		cacheObjs = append(cacheObjs, fencingNode(n, n+"-b1", n != "node-3"))
	}
	cache := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(cacheObjs...).Build()
	targets := NewFencingTargets()
	targets.Set([]rescue.FencingTarget{{Node: "node-3", Pods: 1, Due: true}})
	f.r = newFencingReconciler(cache, f.reports, FencingOptions{
		Targets: targets, Document: types.NamespacedName{Namespace: "rebound-system", Name: DefaultFencingDocument},
		StopSwitch: types.NamespacedName{Namespace: "rebound-system", Name: DefaultStopSwitch},
		Clock:      f.clock, APIClient: f.api,
		Liveness: func(context.Context, []*corev1.Node, time.Time) liveness.Assessment {
			return liveness.Assessment{Nodes: f.verdict}
		},
	})
	return f
}

func (f *fencingFixture) pass(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), fencingKey)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *fencingFixture) advance(d time.Duration) {
	f.clock.mu.Lock()
	f.clock.t = f.clock.t.Add(d)
	f.clock.mu.Unlock()
}

func (f *fencingFixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := f.api.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// setNode writes n as the world (kubelet, a person) would, through the
// tracker, so that the recorded calls are the reconciler's alone.
func (f *fencingFixture) setNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	if err := f.api.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
}

func (f *fencingFixture) document(t *testing.T) fencing.Document {
	t.Helper()
	cm, err := f.api.CoreV1().ConfigMaps("rebound-system").Get(context.Background(), DefaultFencingDocument, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := fencing.ParseDocument([]byte(cm.Data[fencing.DocumentKey]))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// testify has the members answer round about node-3, silent for d.
func (f *fencingFixture) testify(t *testing.T, round string, d time.Duration, members ...string) {
	t.Helper()
	for _, m := range members {
		var r v1alpha1.PeeringReport
		if err := f.reports.Get(context.Background(), client.ObjectKey{Name: m}, &r); err != nil {
			t.Fatal(err)
		}
		r.Fencing.Testimonies = []v1alpha1.FencingTestimony{{Node: "node-3", Round: round, SilentForMilliseconds: d.Milliseconds()}}
		if err := f.reports.Update(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
}

func hasOutOfService(n *corev1.Node) bool { return outOfServiceTaint(n) != nil }

// TestFencingTaintsVerifiesAndUntaints walks one incident: node-3 dead on
// both planes, armed; the reconciler waits T + 2W + margin, asks the
// members, taints on a strict majority's testimony, verifies on a re-read,
// and takes the taint off only once node-3 is back on a new boot.
func TestFencingTaintsVerifiesAndUntaints(t *testing.T) {
	walkFencingIncident(t, newFencingFixture(t, true))
}

// walkFencingIncident plays one incident through f and checks each step.
func walkFencingIncident(t *testing.T, f *fencingFixture) {
	t.Helper()
	res := f.pass(t)
	if hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("tainted before the wait")
	}
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	if res.RequeueAfter <= 0 || res.RequeueAfter > wait {
		t.Fatalf("requeue after %s, want the wait (%s)", res.RequeueAfter, wait)
	}
	if d := f.document(t); d.List.Number != 1 || len(d.List.Members) != 4 || len(d.Rounds) != 0 {
		t.Fatalf("document = %+v, want the four members and no round", d)
	}
	f.advance(wait)
	f.pass(t)
	d := f.document(t)
	if len(d.Rounds) != 1 || d.Rounds[0].Node != "node-3" {
		t.Fatalf("document rounds = %+v, want one about node-3", d.Rounds)
	}
	round := d.Rounds[0].Round
	// One witness is not a majority of three.
	f.testify(t, round, 2*wait, "node-0")
	f.pass(t)
	if hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("tainted on one member's testimony")
	}
	f.testify(t, round, 2*wait, "node-1")
	f.pass(t)
	n := f.node(t, "node-3")
	if !hasOutOfService(n) || n.Annotations[fencing.AnnotationFencedBoot] != "node-3-b1" {
		t.Fatalf("node-3 after a majority testified: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if rescue.Fenced(n) {
		t.Fatal("fenced before the re-read verified the taint")
	}
	f.pass(t)
	if n := f.node(t, "node-3"); !rescue.Fenced(n) || n.Annotations[fencing.AnnotationVerified] != round {
		t.Fatalf("after the re-read: annotations %v, want verified by %s", n.Annotations, round)
	}
	// Back on the same boot: the taint stays.
	f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: now}
	n = f.node(t, "node-3")
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	f.setNode(t, n)
	f.pass(t)
	if !hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("the taint came off on the same boot")
	}
	// A new boot, but an old pod remains.
	n = f.node(t, "node-3")
	n.Status.NodeInfo.BootID = "node-3-b2"
	f.setNode(t, n)
	f.pass(t)
	if !hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("the taint came off while an old pod remains")
	}
	// The world's changes go through the tracker, so that the recorded
	// calls are the reconciler's alone.
	if err := f.api.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "db", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.pass(t)
	n = f.node(t, "node-3")
	if hasOutOfService(n) || n.Annotations[fencing.AnnotationFencedBoot] != "" || n.Annotations[fencing.AnnotationVerified] != "" {
		t.Fatalf("back on a new boot, Ready, no old pod: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	var reasons []string
	obj, err := f.api.Tracker().List(corev1.SchemeGroupVersion.WithResource("events"), corev1.SchemeGroupVersion.WithKind("Event"), "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range obj.(*corev1.EventList).Items {
		reasons = append(reasons, e.Reason)
	}
	if got := strings.Join(reasons, ","); !strings.Contains(got, reasonFencingTainted) || !strings.Contains(got, reasonFencingVerified) || !strings.Contains(got, reasonFencingUntainted) {
		t.Fatalf("Events %s, want tainted, verified and untainted", got)
	}
}

// TestFencingHolds: the rows where the reconciler must not taint.
func TestFencingHolds(t *testing.T) {
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	for _, tc := range []struct {
		name  string
		armed bool
		edit  func(f *fencingFixture)
	}{
		// The control: the same passes with nothing wrong taint.
		{"control: nothing wrong", true, nil},
		{"the agent does not report an armed watchdog", false, nil},
		{"no stateful pod is due yet", true, func(f *fencingFixture) {
			f.r.opts.Targets.Set([]rescue.FencingTarget{{Node: "node-3", Pods: 1}})
		}},
		{"the judge no longer says dead", true, func(f *fencingFixture) {
			f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Unknown}
		}},
		{"the witnesses' Leases do not renew", true, func(f *fencingFixture) {
			for _, m := range []string{"node-0", "node-1", "node-2"} {
				f.verdict[m] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseStale: true, LeaseRenewSeen: now}
			}
		}},
		{"the node's Lease was written since the round's read", true, func(f *fencingFixture) {
			l, _ := f.api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "node-3", metav1.GetOptions{})
			l.Labels = map[string]string{"touched": "yes"}
			l.ResourceVersion = "999"
			_, _ = f.api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(context.Background(), l, metav1.UpdateOptions{})
		}},
		{"the controller runs with --dry-run", true, func(f *fencingFixture) { f.r.opts.DryRun = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFencingFixture(t, tc.armed)
			f.pass(t)
			f.advance(wait)
			f.pass(t)
			round := "node-3-1"
			if d := f.document(t); len(d.Rounds) == 1 {
				round = d.Rounds[0].Round
			}
			if tc.edit != nil {
				tc.edit(f)
			}
			f.testify(t, round, 2*wait, "node-0", "node-1", "node-2")
			f.pass(t)
			f.pass(t)
			want := tc.armed && tc.edit == nil
			if n := f.node(t, "node-3"); hasOutOfService(n) != want {
				t.Fatalf("tainted %v, want %v: %v", hasOutOfService(n), want, n.Spec.Taints)
			}
		})
	}
}

// fencedAndBack puts node-3 in the state after a verified fence of boot
// node-3-b1 (rebound's taint added at taintAt, or without timeAdded when
// taintAt is zero) and brings it back on boot node-3-b2, Ready or not;
// the fixture's own pods go, and pods become node-3's pods.
func fencedAndBack(t *testing.T, f *fencingFixture, taintAt time.Time, ours, ready bool, pods ...*corev1.Pod) {
	t.Helper()
	n := f.node(t, "node-3")
	taint := corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: fencing.OutOfServiceValue, Effect: corev1.TaintEffectNoExecute}
	if !taintAt.IsZero() {
		taint.TimeAdded = ptrTo(metav1.NewTime(taintAt))
	}
	n.Spec.Taints = []corev1.Taint{taint}
	if ours {
		n.Annotations = map[string]string{fencing.AnnotationFencedBoot: "node-3-b1", fencing.AnnotationVerified: "node-3-1-x"}
	}
	n.Status.NodeInfo.BootID = "node-3-b2"
	if ready {
		n.Status.Conditions[0].Status = corev1.ConditionTrue
	}
	f.setNode(t, n)
	for _, p := range [][2]string{{"db", "db-0"}, {"kube-system", "agent-node-3"}} {
		if err := f.api.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		p.Spec.NodeName = "node-3"
		if err := f.api.Tracker().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: now}
}

func ptrTo[T any](v T) *T { return &v }

// TestAttackUntaintOldPods: rows from an independent attack on the
// removal of rebound's taint (a pod that tolerates the taint is not an
// old pod; a Hold while old pods remain asks to be checked again). Each
// row: node-3 fenced on boot b1, back on b2, and one pod bound to it.
func TestAttackUntaintOldPods(t *testing.T) {
	taintAt := now.Add(10 * time.Second) // whole seconds, as apply writes it
	stsPod := func(name string, created time.Time, tols ...corev1.Toleration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, CreationTimestamp: metav1.NewTime(created),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts-db", Controller: ptrTo(true)}}},
			Spec: corev1.PodSpec{Tolerations: tols,
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + name}}}}}}
	}
	old := now.Add(-time.Hour)
	oos := corev1.TaintNodeOutOfService
	for _, tc := range []struct {
		name    string
		taintAt time.Time
		ours    bool
		ready   bool
		pod     *corev1.Pod
		untaint bool
	}{
		{"control: no pod left, Ready on a new boot: untainted", taintAt, true, true, nil, true},
		{"an old StatefulSet pod that does not tolerate the taint: held", taintAt, true, true, stsPod("db-0", old), false},
		// The rows that hold: a pod that tolerates the taint is admitted
		// by the new boot's kubelet with or without the taint, so the
		// taint never kept it from running again; and while its object
		// remains (not Terminating) no StatefulSet replacement of the same
		// name can exist; once Terminating, no kubelet starts it.
		{"an old StatefulSet pod that tolerates everything (Exists, no key): untainted, the taint never barred it", taintAt, true, true,
			stsPod("db-0", old, corev1.Toleration{Operator: corev1.TolerationOpExists}), true},
		{"an old StatefulSet pod that tolerates out-of-service:NoExecute: untainted", taintAt, true, true,
			stsPod("db-0", old, corev1.Toleration{Key: oos, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}), true},
		{"an old StatefulSet pod that tolerates it for 0 s (upstream evicts it at once): untainted, it is Terminating or gone by then", taintAt, true, true,
			stsPod("db-0", old, corev1.Toleration{Key: oos, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo(int64(0))}), true},
		{"an old StatefulSet pod that tolerates it for 300 s: untainted, the new boot's kubelet admits it whatever the taint (tolerationSeconds is upstream's eviction timer only)", taintAt, true, true,
			stsPod("db-0", old, corev1.Toleration{Key: oos, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo(int64(300))}), true},
		{"a toleration of out-of-service:NoSchedule only does not tolerate NoExecute: held", taintAt, true, true,
			stsPod("db-0", old, corev1.Toleration{Key: oos, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}), false},
		{"a toleration of another value does not tolerate nodeshutdown: held", taintAt, true, true,
			stsPod("db-0", old, corev1.Toleration{Key: oos, Operator: corev1.TolerationOpEqual, Value: "other", Effect: corev1.TaintEffectNoExecute}), false},
		{"a toleration with operator Gt (comparison operators off) tolerates nothing: held", taintAt, true, true,
			stsPod("db-0", old, corev1.Toleration{Key: oos, Operator: "Gt", Value: "1", Effect: corev1.TaintEffectNoExecute}), false},
		{"an old pod Terminating, held by a finalizer: held", taintAt, true, true, func() *corev1.Pod {
			p := stsPod("db-0", old)
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.Finalizers = ptrTo(metav1.NewTime(taintAt)), ptrTo(int64(0)), []string{"example.com/hold"}
			return p
		}(), false},
		// creationTimestamp and timeAdded are both whole seconds: a pod
		// created in the taint's own second, before it, is not counted.
		// It was bound to a node already proven reset, so it never ran on
		// the fenced boot and has no replacement while it exists.
		{"a pod created in the taint's own second is not old (letter of the rule, harmless)", taintAt, true, true, stsPod("db-0", taintAt), true},
		{"a taint without timeAdded: every pod that does not tolerate it is old, even one created since: held", time.Time{}, true, true, stsPod("db-0", taintAt.Add(time.Hour)), false},
		{"a taint without timeAdded: a pod that tolerates it does not hold it", time.Time{}, true, true,
			stsPod("db-0", old, corev1.Toleration{Operator: corev1.TolerationOpExists}), true},
		{"a person's taint (no annotation) is never taken off", taintAt, false, true, nil, false},
		{"back on a new boot but not Ready: held", taintAt, true, false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFencingFixture(t, true)
			var pods []*corev1.Pod
			if tc.pod != nil {
				pods = append(pods, tc.pod)
			}
			fencedAndBack(t, f, tc.taintAt, tc.ours, tc.ready, pods...)
			res := f.pass(t)
			n := f.node(t, "node-3")
			if got := !hasOutOfService(n); got != tc.untaint {
				t.Fatalf("untainted %v, want %v (taints %v, annotations %v)", got, tc.untaint, n.Spec.Taints, n.Annotations)
			}
			if !tc.untaint && tc.ours && (res.RequeueAfter <= 0 || res.RequeueAfter > 2*time.Second) {
				t.Fatalf("held, requeue after %s: want a look again within 2 s", res.RequeueAfter)
			}
		})
	}
}

// TestAttackHeldOnANewBootStillReadsFenced: node-3 fenced on boot b1 is back
// on boot b2 but not Ready (or an old pod remains): the reconciler holds the
// taint and its verification, so rescue.Fenced still says the node is
// fenced, though nothing proved boot b2 stopped. b2's kubelet runs every pod
// that tolerates the taint; if b2 falls silent the recovery reconciler
// force-deletes them on b1's proof (pkg/rescue TestAttackFenceOfTheFencedBootOnly).
func TestAttackHeldOnANewBootStillReadsFenced(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ready bool
		pod   *corev1.Pod
	}{
		{"not Ready on the new boot", false, nil},
		{"Ready on the new boot, an old pod stuck Terminating", true, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db-0",
			CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)), DeletionTimestamp: ptrTo(metav1.NewTime(now)), Finalizers: []string{"example.com/hold"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFencingFixture(t, true)
			var pods []*corev1.Pod
			if tc.pod != nil {
				pods = append(pods, tc.pod)
			}
			fencedAndBack(t, f, now.Add(10*time.Second), true, tc.ready, pods...)
			f.pass(t)
			n := f.node(t, "node-3")
			if !hasOutOfService(n) {
				t.Fatal("setup: the taint came off")
			}
			if rescue.Fenced(n) {
				t.Fatalf("attack: node-3 runs boot %s, the fence was of boot %s, and rescue.Fenced still says fenced (annotations %v)",
					n.Status.NodeInfo.BootID, n.Annotations[fencing.AnnotationFencedBoot], n.Annotations)
			}
		})
	}
}

// TestAttackStuckOldPodPollsForever: an old pod that never goes (a finalizer
// nobody removes) keeps the Hold's 2 s look-again, with no backoff: every
// pass re-reads the Node and Lease and LISTs the node's pods across all
// namespaces without a resourceVersion (a quorum read). Load, not safety.
func TestAttackStuckOldPodPollsForever(t *testing.T) {
	f := newFencingFixture(t, true)
	stuck := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db-0",
		CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)), DeletionTimestamp: ptrTo(metav1.NewTime(now)), Finalizers: []string{"example.com/hold"}}}
	fencedAndBack(t, f, now.Add(10*time.Second), true, true, stuck)
	f.api.ClearActions()
	var res ctrl.Result
	for elapsed := time.Duration(0); elapsed < time.Hour; elapsed += res.RequeueAfter {
		res = f.pass(t)
		if res.RequeueAfter <= 0 {
			t.Fatalf("no requeue after %s", elapsed)
		}
		f.advance(res.RequeueAfter)
	}
	lists := 0
	for _, a := range f.api.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			lists++
		}
	}
	if res.RequeueAfter < time.Minute {
		t.Fatalf("attack: after an hour held on a stuck old pod, still looking again every %s (%d quorum LISTs of pods in the hour)", res.RequeueAfter, lists)
	}
}
