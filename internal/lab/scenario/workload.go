package scenario

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"rebound/internal/lab/sandbox"
)

// Workload names a Deployment a scenario puts on the cluster.
type Workload struct {
	Namespace string
	Name      string
	// PreferNode is where the scheduler should put its pod first. It is a
	// preference, not a requirement, so a replacement can go elsewhere.
	PreferNode string
	// PriorityClass marks the workload critical, as calico-kube-controllers
	// and coredns are (system-cluster-critical).
	PriorityClass string
	// MinReadySeconds is the Deployment's: a pod counts as available only
	// after being Ready that long (S9 sets 500 s, so that the workload
	// stays short for the whole test).
	MinReadySeconds int32
	// AllowedNodes, when set, is a required node affinity: the pods run
	// only there (S9 keeps its short Deployment off the node that dies
	// second).
	AllowedNodes []string
	// Requests, when set, are the container's resource requests (S10
	// sizes its pods so that the Ready node has room for one more).
	Requests corev1.ResourceList
	// PodLabels are added to the pod template's labels (S13 puts its pods
	// behind a Service with them).
	PodLabels map[string]string
	// Tolerations are the pod's (S16's coredns-like pods tolerate the
	// control-plane node's taint, as coredns does).
	Tolerations []corev1.Toleration
}

func (w Workload) String() string { return w.Namespace + "/" + w.Name }

// CriticalStandIn is the stand-in for calico-kube-controllers from the
// seed report: a single-replica, system-cluster-critical Deployment in
// kube-system.
func CriticalStandIn(node string) Workload {
	return Workload{Namespace: "kube-system", Name: "calico-kube-controllers", PreferNode: node, PriorityClass: "system-cluster-critical"}
}

// Create creates the Deployment, or leaves an existing one alone.
func (w Workload) Create(ctx context.Context, client kubernetes.Interface) error {
	labels := map[string]string{"k8s-app": w.Name}
	podLabels := map[string]string{"k8s-app": w.Name}
	for k, v := range w.PodLabels {
		podLabels[k] = v
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas:        ptr.To[int32](1),
			MinReadySeconds: w.MinReadySeconds,
			Selector:        &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					PriorityClassName: w.PriorityClass,
					// kwok never pulls images; the name only has to be valid.
					Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
					TerminationGracePeriodSeconds: ptr.To[int64](30),
				},
			},
		},
	}
	if len(w.Tolerations) > 0 {
		d.Spec.Template.Spec.Tolerations = w.Tolerations
	}
	if len(w.Requests) > 0 {
		d.Spec.Template.Spec.Containers[0].Resources.Requests = w.Requests
	}
	if w.PreferNode != "" {
		d.Spec.Template.Spec.Affinity = preferNode(w.PreferNode)
	}
	if len(w.AllowedNodes) > 0 {
		if d.Spec.Template.Spec.Affinity == nil {
			d.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
		}
		d.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: w.AllowedNodes,
			}}}},
		}
	}
	_, err := client.AppsV1().Deployments(w.Namespace).Create(ctx, d, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Deployment %s: %w", w, err)
	}
	return nil
}

// preferNode is an affinity that prefers, not requires, node, so that a
// replacement can go elsewhere.
func preferNode(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
			}}},
		}},
	}}
}

// deployOnPreferredNode creates the workload and waits until it is
// available on its preferred node: the starting point of every scenario.
func deployOnPreferredNode(ctx context.Context, c *sandbox.Cluster, tl *Timeline, obs *Observer, w Workload) error {
	tl.Step("create Deployment %s, preferring %s", w, w.PreferNode)
	if err := w.Create(ctx, c.Client); err != nil {
		return err
	}
	_, err := obs.WaitFor(ctx, 2*time.Minute, "workload available on "+w.PreferNode, func(s Snapshot) bool {
		return s.AvailableOn(w.PreferNode)
	})
	return err
}
