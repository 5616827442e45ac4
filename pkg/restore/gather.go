package restore

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/stopswitch"
)

// clusterState is one read of everything a bring-up looks at: all nodes and
// their Leases, and the objects of the essential workloads' namespaces.
type clusterState struct {
	nodes []*corev1.Node
	// heartbeat is each node's Lease renewTime. Only the Lease counts: a
	// restored cluster replays the Ready condition (and its heartbeat
	// time) of the backup, and only a live kubelet renews its Lease.
	heartbeat map[string]time.Time
	// leaseDuration is each Lease's spec.leaseDurationSeconds; a kubelet
	// renews at a quarter of it.
	leaseDuration map[string]time.Duration
	// reports are the agents' PeeringReports (readReports).
	reports []liveness.Report
	// stopped: the stop switch ConfigMap exists.
	stopped     bool
	namespaces  map[string]map[string]string
	pods        []*corev1.Pod
	replicaSets []*appsv1.ReplicaSet
	workloads   map[WorkloadRef]workloadObject
	pvcs        []*corev1.PersistentVolumeClaim
	// nodePods are the pods bound to Ready nodes, of every namespace: the
	// planner sums their requests to tell whether a Ready node can take a
	// replacement (pkg/rescue target check).
	nodePods []*corev1.Pod
}

// workloadObject is one essential workload as read; exactly one pointer is
// set, or none when it was not found.
type workloadObject struct {
	deployment  *appsv1.Deployment
	daemonSet   *appsv1.DaemonSet
	statefulSet *appsv1.StatefulSet
}

func (w workloadObject) uid() types.UID {
	switch {
	case w.deployment != nil:
		return w.deployment.UID
	case w.daemonSet != nil:
		return w.daemonSet.UID
	case w.statefulSet != nil:
		return w.statefulSet.UID
	}
	return ""
}

// gather reads the cluster. It lists per namespace, so a bring-up of
// kube-system's workloads does not read every pod of a large cluster. The
// stop switch is read first, from the API, every round: a round that
// cannot read it fails, and acts on nothing.
func gather(ctx context.Context, client kubernetes.Interface, reports dynamic.Interface, refs []WorkloadRef, stop types.NamespacedName) (*clusterState, error) {
	s := &clusterState{heartbeat: map[string]time.Time{}, leaseDuration: map[string]time.Duration{}, namespaces: map[string]map[string]string{}, workloads: map[WorkloadRef]workloadObject{}}
	var err error
	s.stopped, err = stopswitch.Read(ctx, stop, func(ctx context.Context, key types.NamespacedName) error {
		_, err := client.CoreV1().ConfigMaps(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		s.nodes = append(s.nodes, &nodes.Items[i])
	}
	leases, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("list node Leases: %w", err)
	}
	if leases != nil {
		for _, l := range leases.Items {
			if l.Spec.RenewTime != nil {
				s.heartbeat[l.Name] = l.Spec.RenewTime.Time
			}
			if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
				s.leaseDuration[l.Name] = time.Duration(*d) * time.Second
			}
		}
	}
	if s.reports, err = readReports(ctx, reports); err != nil {
		return nil, err
	}

	for _, n := range s.nodes {
		if !kubestatus.NodeReady(n) {
			continue
		}
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return nil, fmt.Errorf("list pods on node %s: %w", n.Name, err)
		}
		for i := range pods.Items {
			s.nodePods = append(s.nodePods, &pods.Items[i])
		}
	}

	var namespaces []string
	for _, r := range refs {
		if !slices.Contains(namespaces, r.Namespace) {
			namespaces = append(namespaces, r.Namespace)
		}
	}
	for _, ns := range namespaces {
		if err := s.gatherNamespace(ctx, client, ns, refs); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *clusterState) gatherNamespace(ctx context.Context, client kubernetes.Interface, ns string, refs []WorkloadRef) error {
	nsObj, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil:
		s.namespaces[ns] = nsObj.Labels
	case apierrors.IsNotFound(err):
		s.namespaces[ns] = nil
	default:
		return fmt.Errorf("get namespace %s: %w", ns, err)
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods in %s: %w", ns, err)
	}
	for i := range pods.Items {
		s.pods = append(s.pods, &pods.Items[i])
	}
	rss, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list ReplicaSets in %s: %w", ns, err)
	}
	for i := range rss.Items {
		s.replicaSets = append(s.replicaSets, &rss.Items[i])
	}
	pvcs, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list PersistentVolumeClaims in %s: %w", ns, err)
	}
	for i := range pvcs.Items {
		s.pvcs = append(s.pvcs, &pvcs.Items[i])
	}
	for _, r := range refs {
		if r.Namespace != ns {
			continue
		}
		obj, err := getWorkload(ctx, client, r)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("get %s: %w", r.Display(), err)
		}
		s.workloads[r] = obj
	}
	return nil
}

// getWorkload reads one workload; a NotFound error is returned as is.
func getWorkload(ctx context.Context, client kubernetes.Interface, r WorkloadRef) (workloadObject, error) {
	var w workloadObject
	var err error
	switch r.Kind {
	case KindDeployment:
		w.deployment, err = client.AppsV1().Deployments(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	case KindDaemonSet:
		w.daemonSet, err = client.AppsV1().DaemonSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	case KindStatefulSet:
		w.statefulSet, err = client.AppsV1().StatefulSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	default:
		return w, fmt.Errorf("unknown kind %q", r.Kind)
	}
	if err != nil {
		return workloadObject{}, err
	}
	return w, nil
}

// podsOf returns the pods a workload owns: through its ReplicaSets for a
// Deployment, directly for a DaemonSet or StatefulSet. Ownership is by
// controller UID, never by label, so a look-alike pod does not count.
func (s *clusterState) podsOf(r WorkloadRef) []*corev1.Pod {
	obj := s.workloads[r]
	uid := obj.uid()
	if uid == "" {
		return nil
	}
	owners := map[types.UID]bool{uid: true}
	if r.Kind == KindDeployment {
		owners = map[types.UID]bool{}
		for _, rs := range s.replicaSets {
			if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.UID == uid {
				owners[rs.UID] = true
			}
		}
	}
	var out []*corev1.Pod
	for _, p := range s.pods {
		if p.Namespace != r.Namespace {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && owners[ref.UID] {
			out = append(out, p)
		}
	}
	return out
}

// evaluate judges one workload.
func (s *clusterState) evaluate(r WorkloadRef, nodes map[string]NodeHealth) WorkloadStatus {
	obj := s.workloads[r]
	pods := s.podsOf(r)
	switch {
	case obj.deployment != nil:
		return EvaluateDeployment(obj.deployment, pods, nodes)
	case obj.daemonSet != nil:
		return EvaluateDaemonSet(obj.daemonSet, pods, nodes)
	case obj.statefulSet != nil:
		return EvaluateStatefulSet(obj.statefulSet, pods, nodes)
	}
	return WorkloadStatus{Ref: r, State: StatePending, Message: "not found (deleted since the bring-up started?)"}
}
