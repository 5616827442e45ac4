package restore

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"rebound/pkg/rescue"
)

var (
	alive    = NodeHealth{Ready: true, Heartbeat: true}
	dead     = NodeHealth{Ready: false}
	restored = NodeHealth{Ready: true} // Ready from the backup, no heartbeat yet
)

func pod(name, node string, ready bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func terminating(p *corev1.Pod) *corev1.Pod {
	p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1000, 0)}
	return p
}

// deployment is a Deployment whose status says everything is fine.
func deployment(replicas int32, mutate ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns", Generation: 3},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 3, Replicas: replicas, UpdatedReplicas: replicas, AvailableReplicas: replicas, ReadyReplicas: replicas,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}},
		},
	}
	for _, m := range mutate {
		m(d)
	}
	return d
}

func TestEvaluateDeployment(t *testing.T) {
	nodes := map[string]NodeHealth{"node-0": alive, "node-3": dead, "node-4": restored}
	cases := []struct {
		name  string
		d     *appsv1.Deployment
		pods  []*corev1.Pod
		state State
		msg   string
	}{
		{"available on a live node", deployment(1), []*corev1.Pod{pod("a", "node-0", true)}, StateAvailable, "1 of 1 replicas available"},
		{"generation not observed", deployment(1, func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 2 }),
			[]*corev1.Pod{pod("a", "node-0", true)}, StatePending, "observe generation 3"},
		{"not all updated", deployment(2, func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }),
			[]*corev1.Pod{pod("a", "node-0", true), pod("b", "node-0", true)}, StatePending, "1 of 2 replicas updated"},
		{"old replicas left", deployment(1, func(d *appsv1.Deployment) { d.Status.Replicas = 2 }),
			[]*corev1.Pod{pod("a", "node-0", true)}, StatePending, "1 old replicas pending termination"},
		{"not available, pod on a dead node", deployment(1, func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 0 }),
			[]*corev1.Pod{pod("a", "node-3", true)}, StatePending, "0 of 1 replicas available (pod a on node-3 (NotReady))"},
		{"condition Available false", deployment(1, func(d *appsv1.Deployment) { d.Status.Conditions[0].Status = corev1.ConditionFalse }),
			[]*corev1.Pod{pod("a", "node-0", true)}, StatePending, "condition Available is not True"},
		// The seed's trap after a restore: the status from the backup says
		// available, the pod "exists" and is Ready, but on a node that is
		// dead (not yet noticed) or NotReady.
		{"restored status, pod on a node without heartbeat", deployment(1),
			[]*corev1.Pod{pod("a", "node-4", true)}, StatePending, "the status may date from before the restore"},
		{"restored status, pod on a NotReady node", deployment(1),
			[]*corev1.Pod{pod("a", "node-3", true)}, StatePending, "pod a on node-3 (NotReady)"},
		{"replacement not Ready yet", deployment(1),
			[]*corev1.Pod{terminating(pod("a", "node-3", true)), pod("b", "node-0", false)}, StatePending, "b on node-0 not Ready"},
		{"replaced: old pod terminating on the dead node", deployment(1),
			[]*corev1.Pod{terminating(pod("a", "node-3", true)), pod("b", "node-0", true)}, StateAvailable, "1 of 1"},
		{"scale bounce under way", deployment(0, func(d *appsv1.Deployment) {
			d.Annotations = map[string]string{rescue.ScaleBounceAnnotation: "2"}
		}), nil, StatePending, "2 to restore"},
		{"scaled to 0 by its owner", deployment(0), nil, StateAvailable, "scaled to 0"},
		{"no pod at all", deployment(1), nil, StatePending, "only 0 Ready pods"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := EvaluateDeployment(tc.d, tc.pods, nodes)
			if got.State != tc.state || !strings.Contains(got.Message, tc.msg) {
				t.Errorf("got %s %q, want %s containing %q", got.State, got.Message, tc.state, tc.msg)
			}
			if got.Ref != (WorkloadRef{Namespace: "kube-system", Kind: KindDeployment, Name: "coredns"}) {
				t.Errorf("ref = %v", got.Ref)
			}
		})
	}
}

func daemonSet(desired, updated, available int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "calico-node", Generation: 1},
		Status: appsv1.DaemonSetStatus{
			ObservedGeneration: 1, DesiredNumberScheduled: desired, CurrentNumberScheduled: desired,
			UpdatedNumberScheduled: updated, NumberAvailable: available, NumberReady: available,
		},
	}
}

func TestEvaluateDaemonSet(t *testing.T) {
	nodes := map[string]NodeHealth{"node-0": alive, "node-1": alive, "node-3": dead, "node-4": restored}
	cases := []struct {
		name  string
		ds    *appsv1.DaemonSet
		pods  []*corev1.Pod
		state State
		msg   string
	}{
		{"all on live nodes", daemonSet(2, 2, 2), []*corev1.Pod{pod("a", "node-0", true), pod("b", "node-1", true)}, StateAvailable, "2 of 2 pods on Ready nodes available"},
		// desired 3 counts the dead node-3; its pod stays and is left out.
		{"a pod on a NotReady node is left out", daemonSet(3, 3, 2),
			[]*corev1.Pod{pod("a", "node-0", true), pod("b", "node-1", true), pod("c", "node-3", false)}, StateAvailable, "pods on NotReady node-3 stay there"},
		{"a live node's pod not available", daemonSet(3, 3, 1),
			[]*corev1.Pod{pod("a", "node-0", true), pod("b", "node-1", false), pod("c", "node-3", false)}, StatePending, "1 of 2 pods on Ready nodes available"},
		{"a node without heartbeat yet", daemonSet(3, 3, 3),
			[]*corev1.Pod{pod("a", "node-0", true), pod("b", "node-1", true), pod("d", "node-4", true)}, StatePending, "waiting for a heartbeat from node-4"},
		{"not updated", daemonSet(2, 1, 2), []*corev1.Pod{pod("a", "node-0", true), pod("b", "node-1", true)}, StatePending, "1 of 2 pods on Ready nodes updated"},
		{"stale status", daemonSet(2, 2, 2), []*corev1.Pod{pod("a", "node-0", true), pod("b", "node-1", false)}, StatePending, "may date from before the restore"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := EvaluateDaemonSet(tc.ds, tc.pods, nodes)
			if got.State != tc.state || !strings.Contains(got.Message, tc.msg) {
				t.Errorf("got %s %q, want %s containing %q", got.State, got.Message, tc.state, tc.msg)
			}
		})
	}
}

func TestEvaluateStatefulSet(t *testing.T) {
	nodes := map[string]NodeHealth{"node-0": alive, "node-3": dead}
	sts := func(ready int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd", Generation: 1},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
			Status:     appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: ready},
		}
	}
	if got := EvaluateStatefulSet(sts(2), []*corev1.Pod{pod("etcd-0", "node-0", true), pod("etcd-1", "node-0", true)}, nodes); got.State != StateAvailable {
		t.Errorf("ready on live nodes: %s %s", got.State, got.Message)
	}
	if got := EvaluateStatefulSet(sts(1), []*corev1.Pod{pod("etcd-0", "node-0", true), pod("etcd-1", "node-3", false)}, nodes); got.State != StatePending || !strings.Contains(got.Message, "1 of 2 replicas ready") {
		t.Errorf("one on a dead node: %s %s", got.State, got.Message)
	}
	if got := EvaluateStatefulSet(sts(2), []*corev1.Pod{pod("etcd-0", "node-0", true), pod("etcd-1", "node-3", true)}, nodes); got.State != StatePending || !strings.Contains(got.Message, "before the restore") {
		t.Errorf("restored status: %s %s", got.State, got.Message)
	}
}

func TestRefuseUnsafe(t *testing.T) {
	ws := WorkloadStatus{State: StatePending, Message: "1 of 2 replicas ready"}
	waiting := rescue.CriticalPod{Name: "etcd-1", Node: "node-3", Decision: rescue.DecisionWaitingForFencing, Reason: "StatefulSet pod: waiting for fencing",
		Workload: rescue.Workload{Class: rescue.ClassStateful}}
	if got := refuseUnsafe(ws, []rescue.CriticalPod{waiting}); got.State != StateRefusedUnsafe || !strings.Contains(got.Message, "etcd-1 on NotReady node node-3") {
		t.Errorf("waiting for fencing: %s %q", got.State, got.Message)
	}
	never := rescue.CriticalPod{Decision: rescue.DecisionReportOnly, Workload: rescue.Workload{Class: rescue.ClassStateful}}
	if got := refuseUnsafe(ws, []rescue.CriticalPod{never}); got.State != StateRefusedUnsafe {
		t.Errorf("fencing Never: %s", got.State)
	}
	inFlight := rescue.CriticalPod{Decision: rescue.DecisionInFlight, Workload: rescue.Workload{Class: rescue.ClassStateless}}
	if got := refuseUnsafe(ws, []rescue.CriticalPod{inFlight}); got.State != StatePending {
		t.Errorf("stateless in flight: %s", got.State)
	}
	ok := WorkloadStatus{State: StateAvailable}
	if got := refuseUnsafe(ok, []rescue.CriticalPod{waiting}); got.State != StateAvailable {
		t.Errorf("an available workload stays available: %s", got.State)
	}
}

func TestHeartbeats(t *testing.T) {
	h := newHeartbeats()
	t0 := time.Unix(1000, 0)
	if h.observe("node-0", t0) {
		t.Error("confirmed at first sight: a restored Lease looks the same")
	}
	if h.observe("node-0", t0) {
		t.Error("confirmed without the heartbeat moving")
	}
	if !h.observe("node-0", t0.Add(2*time.Second)) {
		t.Error("not confirmed after the heartbeat moved")
	}
	if !h.observe("node-0", t0) {
		t.Error("confirmation lost")
	}
	if h.observe("node-3", time.Time{}) || h.observe("node-3", time.Time{}) {
		t.Error("a node that never heartbeats was confirmed")
	}
}
