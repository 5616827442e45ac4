package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"rebound/pkg/rescue"
)

func TestTrimDeploymentKeepsWhatThePlannerReads(t *testing.T) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", UID: "u", ResourceVersion: "7",
			Annotations:   map[string]string{rescue.ScaleBounceAnnotation: "2", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
			Spec:       corev1.PodSpec{PriorityClassName: "system-cluster-critical", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		}},
		Status: appsv1.DeploymentStatus{AvailableReplicas: 1},
	}
	out, err := trimDeployment(d)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*appsv1.Deployment)
	switch {
	case got.ManagedFields != nil, len(got.Annotations) != 1, got.Annotations[rescue.ScaleBounceAnnotation] != "2":
		t.Errorf("metadata not trimmed to the scale-bounce annotation: %+v", got.ObjectMeta)
	case len(got.Spec.Template.Spec.Containers) != 0:
		t.Error("containers kept")
	case got.Spec.Template.Labels["app"] != "x", got.Spec.Template.Spec.PriorityClassName != "system-cluster-critical",
		*got.Spec.Replicas != 0, got.Status.AvailableReplicas != 1, got.ResourceVersion != "7", got.UID != "u":
		t.Errorf("a field the planner reads was lost: %+v", got)
	}
}

func TestPodPredicateIgnoresPodsOfReadyNodes(t *testing.T) {
	notReady := func(name string) bool { return name == "dead" }
	pred := podPredicate(notReady)
	pod := func(node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{"status churn on a Ready node", pod("alive", corev1.PodRunning), pod("alive", corev1.PodFailed), false},
		{"change on a NotReady node", pod("dead", corev1.PodRunning), pod("dead", corev1.PodRunning), true},
		{"bound to a NotReady node", pod("", corev1.PodPending), pod("dead", corev1.PodPending), true},
		{"unbound", pod("", corev1.PodPending), pod("", corev1.PodPending), false},
	} {
		if got := pred.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: update passes = %v, want %v", tc.name, got, tc.want)
		}
	}
	if pred.Create(event.CreateEvent{Object: pod("alive", corev1.PodRunning)}) || !pred.Delete(event.DeleteEvent{Object: pod("dead", corev1.PodRunning)}) {
		t.Error("create on a Ready node must not pass, delete on a NotReady node must")
	}
}

func TestNodePredicateIgnoresHeartbeats(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	node := func(status corev1.ConditionStatus, heartbeat int64, taint bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"z": "a"}}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: t0, LastHeartbeatTime: metav1.NewTime(time.Unix(heartbeat, 0))}}
		if taint {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
		}
		return n
	}
	pred := nodePredicate()
	for _, tc := range []struct {
		name     string
		old, new *corev1.Node
		want     bool
	}{
		{"heartbeat only", node(corev1.ConditionTrue, 1, false), node(corev1.ConditionTrue, 2, false), false},
		{"NotReady", node(corev1.ConditionTrue, 1, false), node(corev1.ConditionUnknown, 1, false), true},
		{"tainted", node(corev1.ConditionUnknown, 1, false), node(corev1.ConditionUnknown, 1, true), true},
	} {
		if got := pred.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passes = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTrimmedChangeIgnoresResourceVersionOnly(t *testing.T) {
	rs := func(rv string, avail int32) client.Object {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "r", ResourceVersion: rv}, Status: appsv1.ReplicaSetStatus{AvailableReplicas: avail}}
	}
	pred := trimmedChange()
	if pred.Update(event.UpdateEvent{ObjectOld: rs("1", 1), ObjectNew: rs("2", 1)}) {
		t.Error("a change the trim dropped (only the resourceVersion differs) passed")
	}
	if !pred.Update(event.UpdateEvent{ObjectOld: rs("1", 1), ObjectNew: rs("2", 0)}) {
		t.Error("a change of availability did not pass")
	}
}

func TestOwnerPredicatePassesStatusOnlyDuringAnIncident(t *testing.T) {
	rs := func(rv string, replicas, avail int32) client.Object {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "r", ResourceVersion: rv},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}, Status: appsv1.ReplicaSetStatus{AvailableReplicas: avail}}
	}
	for _, tc := range []struct {
		name     string
		incident bool
		old, new client.Object
		want     bool
	}{
		{"status churn, no node NotReady", false, rs("1", 1, 1), rs("2", 1, 0), false},
		{"status churn during an incident", true, rs("1", 1, 1), rs("2", 1, 0), true},
		{"spec change, no node NotReady", false, rs("1", 1, 1), rs("2", 0, 1), true},
		{"resourceVersion only, during an incident", true, rs("1", 1, 1), rs("2", 1, 1), false},
	} {
		pred := ownerPredicate(func() bool { return tc.incident })
		if got := pred.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passes = %v, want %v", tc.name, got, tc.want)
		}
	}
}
