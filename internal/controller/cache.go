package controller

import (
	"context"
	"fmt"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"rebound/api/v1alpha1"
	"rebound/pkg/kubestatus"
	"rebound/pkg/rescue"
)

// This file keeps the informer caches lean at thousands of nodes and
// hundreds of thousands of pods: every cached kind is trimmed to what the
// planners read, pods are indexed by node so that a pass reads only the
// pods of NotReady nodes, and predicates keep the churn of healthy objects
// from starting passes.

// podNodeIndex is the field index of cached pods by spec.nodeName; pods
// not bound to a node yet are under unboundPods, so that a pass reads the
// Pending pods without reading every pod.
const (
	podNodeIndex = "spec.nodeName"
	unboundPods  = ""
)

// cacheByObject is the per-kind transform of every kind the controllers
// cache. A ByObject transform replaces the default one, so each of them
// drops managed fields too.
func cacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   {Transform: podTransform(newSharedParts())},
		&corev1.Node{}:                  {Transform: trimNode},
		&appsv1.ReplicaSet{}:            {Transform: trimReplicaSet},
		&appsv1.Deployment{}:            {Transform: trimDeployment},
		&corev1.PersistentVolumeClaim{}: {Transform: trimPVC},
		&corev1.Namespace{}:             {Transform: trimNamespace},
		&v1alpha1.RecoveryPolicy{}:      {Transform: trimPolicy},
		// Only the nodes' Leases, for the Lease plane (lease_plane.go): the
		// leader-election Lease is read by its own client.
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{corev1.NamespaceNodeLease: {}}, Transform: trimLease},
	}
}

// podTransform trims a pod (trimPod) and shares its common parts with the
// pods cached before it (sharedParts).
func podTransform(parts *sharedParts) func(any) (any, error) {
	return func(obj any) (any, error) {
		out, err := trimPod(obj)
		if pod, ok := out.(*corev1.Pod); ok && err == nil {
			parts.share(pod)
		}
		return out, err
	}
}

// podNodeName is the podNodeIndex value of a pod: its node, or
// unboundPods.
func podNodeName(o client.Object) []string {
	if p, ok := o.(*corev1.Pod); ok {
		return []string{p.Spec.NodeName}
	}
	return nil
}

// indexPodsByNode registers the spec.nodeName index on cached pods.
func indexPodsByNode(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &corev1.Pod{}, podNodeIndex, podNodeName); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	return nil
}

// leanMeta keeps the identity, owners and labels of an object; annotations
// are kept only for the keys listed.
func leanMeta(m metav1.ObjectMeta, annotations ...string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            m.Labels,
		OwnerReferences:   m.OwnerReferences,
	}
	for _, k := range annotations {
		if v, ok := m.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}

// trimReplicaSet keeps what resolves a pod's owner chain and says whether
// its replacement is available: owners and replica counts. The pod
// template, the bulk of a ReplicaSet, is dropped.
func trimReplicaSet(obj any) (any, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil
	}
	return &appsv1.ReplicaSet{
		TypeMeta:   rs.TypeMeta,
		ObjectMeta: leanMeta(rs.ObjectMeta),
		Spec:       appsv1.ReplicaSetSpec{Replicas: rs.Spec.Replicas},
		Status: appsv1.ReplicaSetStatus{
			Replicas:           rs.Status.Replicas,
			ReadyReplicas:      rs.Status.ReadyReplicas,
			AvailableReplicas:  rs.Status.AvailableReplicas,
			ObservedGeneration: rs.Status.ObservedGeneration,
		},
	}, nil
}

// trimDeployment keeps replicas and availability, the scale-bounce
// annotation, and of the pod template only what a policy selects on
// (labels, priority class): a restore names its policy from them.
func trimDeployment(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	return &appsv1.Deployment{
		TypeMeta:   d.TypeMeta,
		ObjectMeta: leanMeta(d.ObjectMeta, rescue.ScaleBounceAnnotation, rescue.ScaleBouncedForAnnotation),
		Spec: appsv1.DeploymentSpec{
			Replicas: d.Spec.Replicas,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: d.Spec.Template.Labels},
				Spec:       corev1.PodSpec{PriorityClassName: d.Spec.Template.Spec.PriorityClassName},
			},
		},
		Status: appsv1.DeploymentStatus{
			Replicas:           d.Status.Replicas,
			ReadyReplicas:      d.Status.ReadyReplicas,
			AvailableReplicas:  d.Status.AvailableReplicas,
			UpdatedReplicas:    d.Status.UpdatedReplicas,
			ObservedGeneration: d.Status.ObservedGeneration,
		},
	}, nil
}

// trimPVC keeps the access modes: they decide whether a volume is
// exclusive.
func trimPVC(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   pvc.TypeMeta,
		ObjectMeta: leanMeta(pvc.ObjectMeta),
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: pvc.Spec.AccessModes},
	}, nil
}

// trimNamespace keeps the labels, for policies' namespace selectors.
func trimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{TypeMeta: ns.TypeMeta, ObjectMeta: leanMeta(ns.ObjectMeta)}, nil
}

// trimPolicy drops managed fields and annotations (among them a
// kubectl last-applied copy of the whole spec); spec and status are read,
// and the status is written back.
func trimPolicy(obj any) (any, error) {
	p, ok := obj.(*v1alpha1.RecoveryPolicy)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	p.Annotations = nil
	return p, nil
}

// nodeNotReadyFunc tells whether the named node is NotReady in the cache; a node
// the cache does not know counts as NotReady (when unsure, look).
type nodeNotReadyFunc func(name string) bool

// cachedNodeNotReady reads the node from the cache without copying it.
func cachedNodeNotReady(r client.Reader) nodeNotReadyFunc {
	return func(name string) bool {
		if name == "" {
			return false
		}
		var n corev1.Node
		if err := r.Get(context.Background(), types.NamespacedName{Name: name}, &n, client.UnsafeDisableDeepCopy); err != nil {
			return true
		}
		return !kubestatus.NodeReady(&n)
	}
}

// podPredicate lets through only events of pods the planner reads: pods
// bound to a NotReady node (before or after the change). Status churn,
// creations and deletions of pods on Ready nodes start no pass; a node
// that goes NotReady starts one through its own event.
func podPredicate(notReady nodeNotReadyFunc) predicate.Predicate {
	relevant := func(objs ...client.Object) bool {
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok && notReady(p.Spec.NodeName) {
				return true
			}
		}
		return false
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return relevant(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return relevant(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return relevant(e.ObjectOld, e.ObjectNew) },
		GenericFunc: func(e event.GenericEvent) bool { return relevant(e.Object) },
	}
}

// nodePredicate lets through node updates that can change a plan: the
// Ready condition (status or transition time), labels (zone, role),
// taints, cordoning and allocatable (a NoTarget pod is re-checked at once
// when a node is uncordoned or grows). Heartbeat-only status updates pass
// no further.
func nodePredicate() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		oc, nc := readyOf(o), readyOf(n)
		return oc.Status != nc.Status || !oc.LastTransitionTime.Equal(&nc.LastTransitionTime) ||
			!equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
			!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
			o.Spec.Unschedulable != n.Spec.Unschedulable ||
			!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable)
	}}
}

func readyOf(n *corev1.Node) corev1.NodeCondition {
	if c := kubestatus.NodeReadyCondition(n); c != nil {
		return *c
	}
	return corev1.NodeCondition{}
}

// trimmedChange lets an update through only when the trimmed object changed
// beyond its resourceVersion: the transforms already dropped what no
// planner reads, so an equal trimmed object cannot change a plan.
func trimmedChange() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		o, n := e.ObjectOld.DeepCopyObject().(client.Object), e.ObjectNew.DeepCopyObject().(client.Object)
		o.SetResourceVersion("")
		n.SetResourceVersion("")
		return !equality.Semantic.DeepEqual(o, n)
	}}
}

// anyNodeNotReady tells whether some cached node is NotReady: an incident.
func anyNodeNotReady(r client.Reader) func() bool {
	return func() bool {
		var nodes corev1.NodeList
		if err := r.List(context.Background(), &nodes, client.UnsafeDisableDeepCopy); err != nil {
			return true
		}
		for i := range nodes.Items {
			if !kubestatus.NodeReady(&nodes.Items[i]) {
				return true
			}
		}
		return false
	}
}

// ownerPredicate is for ReplicaSets and Deployments: their status matters
// to a plan only while some node is NotReady (whether a stranded pod's
// replacement is available); outside an incident only a change beyond
// the status does (a scale-bounce annotation, the replica count). At
// 1,000 nodes kube-controller-manager rewrote a ReplicaSet's status
// ~25 times a second under load, and each started a pass
// (rebound-bench scale).
func ownerPredicate(incident func() bool) predicate.Predicate {
	changed := trimmedChange()
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if !changed.Update(e) {
			return false
		}
		if incident() {
			return true
		}
		o, n := e.ObjectOld.DeepCopyObject().(client.Object), e.ObjectNew.DeepCopyObject().(client.Object)
		clearStatus(o)
		clearStatus(n)
		return changed.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: n})
	}}
}

func clearStatus(o client.Object) {
	switch x := o.(type) {
	case *appsv1.ReplicaSet:
		x.Status = appsv1.ReplicaSetStatus{}
	case *appsv1.Deployment:
		x.Status = appsv1.DeploymentStatus{}
	}
}

// countTriggers counts, by kind, the events pred lets through: each asks
// for a pass (rebound_recovery_triggers_total), so that a busy idle
// controller says what keeps it busy.
func countTriggers(obj client.Object, pred predicate.Predicate) predicate.Predicate {
	c := recoveryTriggers.WithLabelValues(reflect.TypeOf(obj).Elem().Name())
	count := func(pass bool) bool {
		if pass {
			c.Inc()
		}
		return pass
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return count(pred.Create(e)) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return count(pred.Delete(e)) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return count(pred.Update(e)) },
		GenericFunc: func(e event.GenericEvent) bool { return count(pred.Generic(e)) },
	}
}
