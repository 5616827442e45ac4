package kube

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/pkg/peering"
)

func TestBGPAddressAndPort(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "n1"},
		{Type: corev1.NodeInternalIP, Address: "fd00::1"},
		{Type: corev1.NodeInternalIP, Address: "10.0.0.7"},
	}}}
	if got := BGPAddress(n); got != netip.MustParseAddr("10.0.0.7") {
		t.Errorf("InternalIP: %v", got)
	}
	n.Annotations = map[string]string{peering.AnnotationCalicoIPv4: "10.1.2.3/24", peering.AnnotationBGPPort: "1790"}
	if got := BGPAddress(n); got != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("Calico annotation first: %v", got)
	}
	if BGPPort(n) != 1790 {
		t.Errorf("port %d", BGPPort(n))
	}
	n.Annotations = map[string]string{peering.AnnotationCalicoIPv4: "garbage", peering.AnnotationBGPPort: "99999"}
	if got := BGPAddress(n); got != netip.MustParseAddr("10.0.0.7") || BGPPort(n) != 0 {
		t.Errorf("bad annotations must fall back: %v %d", got, BGPPort(n))
	}
}

func TestPlannerNode(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{peering.LabelKeepInMesh: "true"}, Annotations: map[string]string{peering.AnnotationBGPPort: "1790"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
			}},
	}
	pn := PlannerNode(n)
	if pn.Ready || !pn.KeepInMesh || !pn.LastTransition.Equal(now.Add(-time.Minute)) || pn.Port != 1790 || pn.Address != netip.MustParseAddr("10.0.0.7") {
		t.Errorf("planner node = %+v", pn)
	}
}
