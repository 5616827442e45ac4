package scenario

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nodeReadyAt(name string, status corev1.ConditionStatus, at time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(at)},
	}}}
}

func TestReadyTransitions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	down := []*corev1.Node{
		nodeReadyAt("node-1", corev1.ConditionUnknown, t0.Add(3*time.Second)),
		nodeReadyAt("node-2", corev1.ConditionFalse, t0.Add(9*time.Second)),
		nodeReadyAt("node-3", corev1.ConditionUnknown, t0),
	}
	earliest, latest, err := readyTransitions(down, false)
	if err != nil || !earliest.Equal(t0) || !latest.Equal(t0.Add(9*time.Second)) {
		t.Errorf("NotReady nodes: %v, %v, %v; want %v and %v", earliest, latest, err, t0, t0.Add(9*time.Second))
	}
	up := []*corev1.Node{
		nodeReadyAt("node-1", corev1.ConditionTrue, t0.Add(70*time.Second)),
		nodeReadyAt("node-2", corev1.ConditionTrue, t0.Add(65*time.Second)),
	}
	if earliest, _, err := readyTransitions(up, true); err != nil || !earliest.Equal(t0.Add(65*time.Second)) {
		t.Errorf("Ready nodes: %v, %v; want %v", earliest, err, t0.Add(65*time.Second))
	}
	// The window the S7, S10 and S11 runners report: 9 s to 65 s.
	if got := t0.Add(65 * time.Second).Sub(latest); got != 56*time.Second {
		t.Errorf("window = %v, want 56s", got)
	}

	for name, nodes := range map[string][]*corev1.Node{
		"one already back":   {down[0], nodeReadyAt("node-2", corev1.ConditionTrue, t0)},
		"no Ready condition": {{ObjectMeta: metav1.ObjectMeta{Name: "node-4"}}},
		"no transition time": {nodeReadyAt("node-5", corev1.ConditionFalse, time.Time{})},
		"no nodes":           nil,
	} {
		if _, _, err := readyTransitions(nodes, false); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
