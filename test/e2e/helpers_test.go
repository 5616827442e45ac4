package e2e

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

func podSummaries(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		s := fmt.Sprintf("%s@%s", p.Name, p.Spec.NodeName)
		if p.DeletionTimestamp != nil {
			s += "(terminating)"
		}
		out = append(out, s)
	}
	return out
}
