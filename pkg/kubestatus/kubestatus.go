// Package kubestatus reads the status of Nodes, Pods and workloads the one
// way rebound reads it everywhere (planner, restore, diagnose, scenarios,
// tests): which condition counts, what a missing condition means, and when
// a condition last changed. Pure functions over API objects, standard
// library and k8s.io/api only.
package kubestatus

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// NodeReadyCondition returns the node's Ready condition, nil when it has
// none.
func NodeReadyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// NodeReady reports whether the node's Ready condition is True. A node
// without one is not Ready.
func NodeReady(n *corev1.Node) bool {
	c := NodeReadyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

// NodeReadySince returns whether the node is Ready and when its Ready
// condition last changed (lastTransitionTime, as the node lifecycle
// controller wrote it); zero when it has no Ready condition.
func NodeReadySince(n *corev1.Node) (bool, time.Time) {
	c := NodeReadyCondition(n)
	if c == nil {
		return false, time.Time{}
	}
	return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
}

// PodReadyCondition returns the pod's Ready condition, nil when it has none.
func PodReadyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	c := PodReadyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// PodRunningReady reports whether the pod is Running and Ready: what a
// workload's availability counts.
func PodRunningReady(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && PodReady(p)
}

// PodReadySince returns whether the pod is Ready and when its Ready
// condition last changed; zero when it has none.
func PodReadySince(p *corev1.Pod) (bool, time.Time) {
	c := PodReadyCondition(p)
	if c == nil {
		return false, time.Time{}
	}
	return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
}

// Replicas is a workload's desired replica count: the API's default, 1,
// when the field is unset.
func Replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// DeploymentCondition returns the Deployment's condition of type t, nil
// when it has none.
func DeploymentCondition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// DeploymentAvailable reports whether the Deployment's Available condition
// is True.
func DeploymentAvailable(d *appsv1.Deployment) bool {
	c := DeploymentCondition(d, appsv1.DeploymentAvailable)
	return c != nil && c.Status == corev1.ConditionTrue
}

// DeploymentAvailableSince returns whether the Deployment is Available and
// when its Available condition last changed; zero when it has none.
func DeploymentAvailableSince(d *appsv1.Deployment) (bool, time.Time) {
	c := DeploymentCondition(d, appsv1.DeploymentAvailable)
	if c == nil {
		return false, time.Time{}
	}
	return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
}
