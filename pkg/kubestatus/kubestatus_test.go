package kubestatus

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNode(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		conds []corev1.NodeCondition
		ready bool
		since time.Time
	}{
		{"no conditions", nil, false, time.Time{}},
		{"ready", []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}, true, at},
		{"unknown", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(at)}}, false, at},
	} {
		n := &corev1.Node{Status: corev1.NodeStatus{Conditions: tc.conds}}
		ready, since := NodeReadySince(n)
		if ready != tc.ready || !since.Equal(tc.since) || NodeReady(n) != tc.ready {
			t.Errorf("%s: NodeReadySince = %v, %v; want %v, %v", tc.name, ready, since, tc.ready, tc.since)
		}
	}
}

func TestPod(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ready := []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	for _, tc := range []struct {
		name                string
		phase               corev1.PodPhase
		conds               []corev1.PodCondition
		ready, runningReady bool
	}{
		{"pending", corev1.PodPending, nil, false, false},
		{"running ready", corev1.PodRunning, ready, true, true},
		{"ready but not running", corev1.PodSucceeded, ready, true, false},
	} {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: tc.phase, Conditions: tc.conds}}
		if PodReady(p) != tc.ready || PodRunningReady(p) != tc.runningReady {
			t.Errorf("%s: PodReady %v, PodRunningReady %v; want %v, %v", tc.name, PodReady(p), PodRunningReady(p), tc.ready, tc.runningReady)
		}
		if r, since := PodReadySince(p); r && !since.Equal(at) {
			t.Errorf("%s: since %v, want %v", tc.name, since, at)
		}
	}
}

func TestWorkload(t *testing.T) {
	three := int32(3)
	if Replicas(nil) != 1 || Replicas(&three) != 3 {
		t.Errorf("Replicas: nil -> %d, 3 -> %d", Replicas(nil), Replicas(&three))
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := &appsv1.Deployment{Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue},
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)},
	}}}
	if ok, since := DeploymentAvailableSince(d); !ok || !since.Equal(at) || !DeploymentAvailable(d) {
		t.Errorf("DeploymentAvailableSince = %v, %v", ok, since)
	}
	if DeploymentAvailable(&appsv1.Deployment{}) {
		t.Error("a Deployment without conditions is Available")
	}
}
