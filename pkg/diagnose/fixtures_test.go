package diagnose

import (
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
	"rebound/pkg/peering"
	"rebound/pkg/policyfile"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// t0 is when the test nodes go NotReady.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// world builds the input of Explain. Objects are fresh per test.
type world struct {
	s rescue.Snapshot
	x Extra
}

func newWorld(now time.Time) *world {
	return &world{s: rescue.Snapshot{
		Now:        now,
		Namespaces: map[string]map[string]string{"kube-system": {}, "default": {}},
		ZoneConfig: zone.DefaultConfig(),
	}}
}

func (w *world) explain() Report { return Explain(w.s, w.x) }

func ptr[T any](v T) *T { return &v }

// node adds a node in zone r1/z1 whose Ready condition has status since.
// A NotReady node also carries the NoSchedule taint kube-controller-manager
// puts on it at once (not-ready for False, unreachable otherwise).
func (w *world) node(name string, status corev1.ConditionStatus, since time.Time, taints ...corev1.Taint) *corev1.Node {
	if status != corev1.ConditionTrue {
		key := corev1.TaintNodeUnreachable
		if status == corev1.ConditionFalse {
			key = corev1.TaintNodeNotReady
		}
		taints = append(taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{zone.LabelTopologyZone: "z1", zone.LabelTopologyRegion: "r1"}, Annotations: map[string]string{}},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", len(w.s.Nodes)+1)}},
		},
	}
	w.s.Nodes = append(w.s.Nodes, n)
	return n
}

// cluster adds node-0..node-(n-1), those in down NotReady (Unknown) since
// t0, the others Ready for an hour.
func (w *world) cluster(n int, down ...int) {
	for i := range n {
		status, since := corev1.ConditionTrue, t0.Add(-time.Hour)
		for _, d := range down {
			if d == i {
				status, since = corev1.ConditionUnknown, t0
			}
		}
		w.node(fmt.Sprintf("node-%d", i), status, since)
	}
}

func (w *world) nodeNamed(name string) *corev1.Node {
	for _, n := range w.s.Nodes {
		if n.Name == name {
			return n
		}
	}
	panic("no node " + name)
}

func noExecute(key string, added time.Time) corev1.Taint {
	a := metav1.NewTime(added)
	return corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute, TimeAdded: &a}
}

func tolerations(seconds int64) []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(seconds)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(seconds)},
	}
}

func controllerRef(kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + kind + "-" + name), Controller: ptr(true)}}
}

// deployment adds a Deployment, its ReplicaSet and one pod of it per node
// given, in namespace ns; critical pods get priority class
// system-cluster-critical.
func (w *world) deployment(ns, name string, critical bool, available int32, nodes ...string) []*corev1.Pod {
	replicas := int32(len(nodes))
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-Deployment-" + name), ResourceVersion: "7"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr(replicas)},
		Status:     appsv1.DeploymentStatus{Replicas: replicas, UpdatedReplicas: replicas, AvailableReplicas: available},
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-5d4f", UID: types.UID("uid-ReplicaSet-" + name + "-5d4f"),
			OwnerReferences: controllerRef("Deployment", name)},
		Spec:   appsv1.ReplicaSetSpec{Replicas: ptr(replicas)},
		Status: appsv1.ReplicaSetStatus{Replicas: replicas, AvailableReplicas: available},
	}
	w.s.Deployments = append(w.s.Deployments, d)
	w.s.ReplicaSets = append(w.s.ReplicaSets, rs)
	var pods []*corev1.Pod
	for i, node := range nodes {
		pods = append(pods, w.pod(ns, fmt.Sprintf("%s-5d4f-x%d", name, i), node, critical, "ReplicaSet", rs.Name))
	}
	return pods
}

// pod adds a running pod with the default 300 s tolerations, Ready when its
// node is Ready.
func (w *world) pod(ns, name, node string, critical bool, ownerKind, ownerName string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-pod-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:       corev1.PodSpec{NodeName: node, Tolerations: tolerations(300)},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if critical {
		p.Spec.PriorityClassName = "system-cluster-critical"
	}
	if ownerKind != "" {
		p.OwnerReferences = controllerRef(ownerKind, ownerName)
	}
	ready := corev1.ConditionTrue
	for _, n := range w.s.Nodes {
		if n.Name == node && n.Status.Conditions[0].Status != corev1.ConditionTrue {
			ready = corev1.ConditionFalse
		}
	}
	if node == "" {
		p.Status.Phase = corev1.PodPending
		ready = corev1.ConditionFalse
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
	w.s.Pods = append(w.s.Pods, p)
	return p
}

// statefulSet adds a one-replica StatefulSet whose pod mounts a
// ReadWriteOnce PVC, on node.
func (w *world) statefulSet(name, node string, available int32) *corev1.Pod {
	w.x.StatefulSets = append(w.x.StatefulSets, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID("uid-StatefulSet-" + name)},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr(int32(1))},
		Status:     appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: available, AvailableReplicas: available},
	})
	claim := "data-" + name + "-0"
	w.s.PVCs = append(w.s.PVCs, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: claim},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
	})
	p := w.pod("kube-system", name+"-0", node, true, "StatefulSet", name)
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	return p
}

// daemonSet adds a DaemonSet with one pod per node.
func (w *world) daemonSet(name string, available int32, nodes ...string) {
	w.x.DaemonSets = append(w.x.DaemonSets, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID("uid-DaemonSet-" + name)},
		Status:     appsv1.DaemonSetStatus{DesiredNumberScheduled: int32(len(nodes)), NumberAvailable: available, UpdatedNumberScheduled: int32(len(nodes))},
	})
	for _, n := range nodes {
		w.pod("kube-system", name+"-"+n, n, true, "DaemonSet", name)
	}
}

// policy adds the default policy (kube-system, system-cluster-critical or
// system-node-critical, 30 s).
func (w *world) policy(mutate ...func(*v1alpha1.RecoveryPolicy)) {
	p := policyfile.Default()
	for _, m := range mutate {
		m(p)
	}
	w.s.Policies = append(w.s.Policies, p)
}

// s1 is the seed S1: 5 nodes, node-1..4 NotReady since t0 (zone
// PartialDisruption, rate 0), a critical Deployment's pod on node-3.
func s1(now time.Time) *world {
	w := newWorld(now)
	w.cluster(5, 1, 2, 3, 4)
	w.deployment("kube-system", "calico-kube-controllers", true, 0, "node-3")
	w.policy()
	return w
}

// s5 is S5: node-3 alone NotReady (Normal zone, not tainted yet), a
// StatefulSet pod with a ReadWriteOnce volume on it.
func s5(now time.Time) *world {
	w := newWorld(now)
	w.cluster(5, 3)
	w.statefulSet("etcd-standin", "node-3", 0)
	w.policy()
	return w
}

// bgp labels the nodes' peer-set membership ("true"/"false").
func (w *world) inSet(name, value string) {
	w.nodeNamed(name).Labels[peering.LabelInSet] = value
}

// report records an agent's session report (every session listed, no
// since times: the form the evidence rules trust least).
func (w *world) report(name string, when time.Time, sessions map[string]string) {
	r := peering.Report{Reporter: name, ObservedAt: when}
	for _, peer := range slices.Sorted(maps.Keys(sessions)) {
		r.Sessions = append(r.Sessions, peering.Session{Peer: peer, State: sessions[peer]})
	}
	w.x.PeeringReports = append(w.x.PeeringReports, r)
}
