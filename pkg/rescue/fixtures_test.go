package rescue

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
	"rebound/pkg/zone"
)

// t0 is when the test nodes go NotReady.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// world builds snapshots for tests. Its objects are fresh per test, so
// cases may mutate them.
type world struct {
	s Snapshot
}

func newWorld(now time.Time) *world {
	return &world{s: Snapshot{
		Now:        now,
		Namespaces: map[string]map[string]string{"kube-system": {"kubernetes.io/metadata.name": "kube-system"}, "apps": {"team": "web"}},
		ZoneConfig: zone.DefaultConfig(),
	}}
}

// node adds a node in zone z. status is its Ready condition's status. A
// NotReady node also gets the NoSchedule taint kube-controller-manager puts
// on it at once, whatever its zone's state (not-ready for False,
// unreachable otherwise), unless taints name one: withoutNoSchedule takes
// it off for the rows about the moment before it comes.
func (w *world) node(name, z string, status corev1.ConditionStatus, since time.Time, taints ...corev1.Taint) *corev1.Node {
	if status != corev1.ConditionTrue {
		key := corev1.TaintNodeUnreachable
		if status == corev1.ConditionFalse {
			key = corev1.TaintNodeNotReady
		}
		if !slices.ContainsFunc(taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == corev1.TaintEffectNoSchedule }) {
			added := metav1.NewTime(since)
			taints = append(taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added})
		}
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{zone.LabelTopologyZone: z, zone.LabelTopologyRegion: "r1"}},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since),
		}}},
	}
	w.s.Nodes = append(w.s.Nodes, n)
	return n
}

// zoneOf adds ready nodes ready-0.. and NotReady (Unknown since t0) nodes
// down-0.. in zone z.
func (w *world) zoneOf(z string, ready, down int) {
	for i := range ready {
		w.node(fmt.Sprintf("%s-ready-%d", z, i), z, corev1.ConditionTrue, t0.Add(-time.Hour))
	}
	for i := range down {
		w.node(fmt.Sprintf("%s-down-%d", z, i), z, corev1.ConditionUnknown, t0)
	}
}

// withoutNoSchedule takes kube-controller-manager's NoSchedule taints off a
// node: the moment between its NotReady flip and the taint.
func withoutNoSchedule(n *corev1.Node) {
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady)
	})
}

func noExecute(key string, added time.Time) corev1.Taint {
	a := metav1.NewTime(added)
	return corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute, TimeAdded: &a}
}

func outOfService() corev1.Taint {
	return corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
}

// defaultTolerations are what the DefaultTolerationSeconds admission plugin
// adds to every pod: 300 s for not-ready and unreachable.
func defaultTolerations(seconds *int64) []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds},
	}
}

func controllerRef(kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + kind + "-" + name), Controller: ptr(true)}}
}

// deployment adds a Deployment and its ReplicaSet.
func (w *world) deployment(ns, name string, replicas, available int32) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-Deployment-" + name), ResourceVersion: "7"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(replicas), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{PriorityClassName: "system-cluster-critical"},
		}},
		Status: appsv1.DeploymentStatus{Replicas: replicas, AvailableReplicas: available},
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-5d4f", UID: types.UID("uid-ReplicaSet-" + name + "-5d4f"),
			OwnerReferences: controllerRef("Deployment", name)},
		Spec:   appsv1.ReplicaSetSpec{Replicas: ptr(replicas)},
		Status: appsv1.ReplicaSetStatus{Replicas: replicas, AvailableReplicas: available},
	}
	w.s.Deployments = append(w.s.Deployments, d)
	w.s.ReplicaSets = append(w.s.ReplicaSets, rs)
	return d, rs
}

// pod adds a critical pod (kube-system, system-cluster-critical, default
// tolerations of 300 s) owned by the given controller ("" for none).
func (w *world) pod(name, node, ownerKind, ownerName string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID("uid-pod-" + name), ResourceVersion: "3",
			Labels: map[string]string{"app": ownerName}},
		Spec: corev1.PodSpec{NodeName: node, PriorityClassName: "system-cluster-critical",
			Tolerations: defaultTolerations(ptr(int64(300)))},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ownerKind != "" {
		p.OwnerReferences = controllerRef(ownerKind, ownerName)
	}
	w.s.Pods = append(w.s.Pods, p)
	return p
}

// deploymentPod adds a Deployment of the given size and one pod of it.
func (w *world) deploymentPod(name, node string, replicas, available int32) *corev1.Pod {
	_, rs := w.deployment("kube-system", name, replicas, available)
	p := w.pod(name+"-5d4f-x1", node, "ReplicaSet", rs.Name)
	p.Labels["app"] = name
	return p
}

// pvc adds a PVC with the given access mode.
func (w *world) pvc(name string, mode corev1.PersistentVolumeAccessMode) {
	w.s.PVCs = append(w.s.PVCs, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{mode}},
	})
}

func mountPVC(p *corev1.Pod, claim string) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
}

// terminating marks a pod deleted at requested with a 30 s grace period.
func terminating(p *corev1.Pod, requested time.Time) {
	p.DeletionGracePeriodSeconds = ptr(int64(30))
	p.DeletionTimestamp = ptr(metav1.NewTime(requested.Add(30 * time.Second)))
}

// policy adds the default-like policy: system-cluster-critical pods, 30 s.
func (w *world) policy(name string, mutate ...func(*v1alpha1.RecoveryPolicy)) *v1alpha1.RecoveryPolicy {
	p := &v1alpha1.RecoveryPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RecoveryPolicySpec{
			Critical:           v1alpha1.CriticalSelector{PriorityClassNames: []string{"system-cluster-critical", "system-node-critical"}},
			MaxUnavailableTime: &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	w.s.Policies = append(w.s.Policies, p)
	return p
}

func record(action v1alpha1.RecordedAction, pod string, when time.Time) v1alpha1.ActionRecord {
	return v1alpha1.ActionRecord{Time: metav1.NewTime(when), Action: action, Pod: pod, Result: "Succeeded"}
}

// s1 is the seed S1: 5 nodes in one zone, node-1..4 NotReady (Unknown)
// since t0 and never tainted (PartialDisruption in a zone of 5 <= 50: rate
// 0), a critical Deployment's pod on node-3, the default policy.
func s1(now time.Time) *world {
	w := newWorld(now)
	w.node("node-0", "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
	for i := 1; i <= 4; i++ {
		w.node(fmt.Sprintf("node-%d", i), "z1", corev1.ConditionUnknown, t0)
	}
	w.deploymentPod("coredns", "node-3", 1, 0)
	w.policy("default")
	return w
}

// s3 is the seed S3: node-3 alone dies (Normal zone); kube-controller-manager
// taints it unreachable:NoExecute 5 s later; pods tolerate it for 300 s.
func s3(now time.Time) *world {
	w := newWorld(now)
	for i := 0; i < 5; i++ {
		if i == 3 {
			w.node("node-3", "z1", corev1.ConditionUnknown, t0, noExecute(corev1.TaintNodeUnreachable, at(5*time.Second)))
			continue
		}
		w.node(fmt.Sprintf("node-%d", i), "z1", corev1.ConditionTrue, t0.Add(-time.Hour))
	}
	w.deploymentPod("coredns", "node-3", 1, 0)
	w.policy("default")
	return w
}
