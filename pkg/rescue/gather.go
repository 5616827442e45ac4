package rescue

import corev1 "k8s.io/api/core/v1"

// NodeNotReady applies PlanFor's own rule (the Ready condition is not
// True, or missing) to one node. Gatherers use it to hand PlanFor only the
// pods of NotReady nodes, the only pods it examines, and so read a few
// hundred pods instead of every pod of the cluster.
func NodeNotReady(n *corev1.Node) bool {
	ready, _, _ := readyCondition(n)
	return !ready
}
