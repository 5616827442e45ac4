package rescue

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/fencing"
)

func TestFenced(t *testing.T) {
	outOfService := corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: fencing.OutOfServiceValue, Effect: corev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name        string
		taints      []corev1.Taint
		annotations map[string]string
		want        bool
	}{
		{"no taint", nil, nil, false},
		{"a person's taint is proof at once", []corev1.Taint{outOfService}, nil, true},
		{"the taint with another effect is not", []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoSchedule}}, nil, false},
		{"rebound's taint before its re-read is not",
			[]corev1.Taint{outOfService}, map[string]string{fencing.AnnotationFencedBoot: "b1"}, false},
		{"rebound's taint after its re-read is",
			[]corev1.Taint{outOfService}, map[string]string{fencing.AnnotationFencedBoot: "b1", fencing.AnnotationVerified: "node-3-1"}, true},
		{"a verification without the taint is not",
			nil, map[string]string{fencing.AnnotationFencedBoot: "b1", fencing.AnnotationVerified: "node-3-1"}, false},
		{"rebound's verified taint of an earlier boot is not (the node runs b2)",
			[]corev1.Taint{outOfService}, map[string]string{fencing.AnnotationFencedBoot: "b0", fencing.AnnotationVerified: "node-3-1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{Spec: corev1.NodeSpec{Taints: tc.taints}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b1"}}}
			n.Annotations = tc.annotations
			if got := Fenced(n); got != tc.want {
				t.Fatalf("Fenced = %v, want %v", got, tc.want)
			}
		})
	}
}
