package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
)

// TestTrimPodKeepsWhatThePlannerReads: the controller must decide on the
// trimmed pod as diagnose does on the full one. A generic ephemeral volume
// makes a pod stateful (it was dropped once, and the controller called
// Stateless what diagnose called WaitingForFencing); nodeSelector,
// required affinity and requests decide the target check.
func TestTrimPodKeepsWhatThePlannerReads(t *testing.T) {
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "db-x", UID: "p"},
		Spec: corev1.PodSpec{
			NodeName:     "node-3",
			NodeSelector: map[string]string{"role": "db"},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpExists}}}}}}},
			Containers: []corev1.Container{{Name: "db", Image: "db:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}},
			Volumes: []corev1.Volume{
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
					Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}},
			},
		},
	}
	out, err := trimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].Ephemeral == nil {
		t.Errorf("volumes = %+v, want the ephemeral one only", p.Spec.Volumes)
	}
	if p.Spec.NodeSelector["role"] != "db" || p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Errorf("scheduling constraints dropped: %+v", p.Spec)
	}
	if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Resources.Requests.Cpu().String() != "2" || p.Spec.Containers[0].Image != "" || p.Spec.Containers[0].Env != nil {
		t.Errorf("containers = %+v, want one with the pod's requests only", p.Spec.Containers)
	}

	// The decision on the trimmed pod equals the one on the full pod.
	decide := func(pod *corev1.Pod) rescue.Decision {
		now := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
		node := func(name string, st corev1.ConditionStatus) *corev1.Node {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: st, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}}}
		}
		pod.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "db-1", UID: "rs", Controller: ptr.To(true)}}
		plan := rescue.PlanFor(rescue.Snapshot{
			Now:         now,
			Nodes:       []*corev1.Node{node("node-0", corev1.ConditionTrue), node("node-3", corev1.ConditionUnknown)},
			Pods:        []*corev1.Pod{pod},
			ReplicaSets: []*appsv1.ReplicaSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "db-1", UID: "rs"}}},
			Policies:    []*v1alpha1.RecoveryPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: v1alpha1.RecoveryPolicySpec{Critical: v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}}}}},
		})
		if len(plan.Critical) != 1 {
			t.Fatalf("critical = %+v", plan.Critical)
		}
		return plan.Critical[0].Decision
	}
	if a, b := decide(full.DeepCopy()), decide(p.DeepCopy()); a != b || a != rescue.DecisionWaitingForFencing {
		t.Errorf("decision on the full pod %s, on the trimmed pod %s; want both WaitingForFencing", a, b)
	}
}

// TestNodePredicateSeesCordon: an uncordon must start a pass at once, so
// that a NoTarget pod is replaced within seconds (S7).
func TestNodePredicateSeesCordon(t *testing.T) {
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	n := old.DeepCopy()
	n.Spec.Unschedulable = false
	if !nodePredicate().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: n}) {
		t.Error("uncordon filtered out")
	}
	grown := old.DeepCopy()
	grown.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	if !nodePredicate().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: grown}) {
		t.Error("allocatable change filtered out")
	}
}

// TestTrimPodKeepsRequests: the trimmed pod requests what the scheduler
// counts for the full one (containers, a sidecar and a plain init
// container, overhead), and keeps of its conditions only DisruptionTarget.
func TestTrimPodKeepsRequests(t *testing.T) {
	cpu := func(v string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v), corev1.ResourceMemory: resource.MustParse("64Mi")}}
	}
	full := &corev1.Pod{
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "a", Resources: cpu("500m")}, {Name: "b", Resources: cpu("250m")}},
			InitContainers: []corev1.Container{{Name: "setup", Resources: cpu("2")}, {Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: cpu("100m")}},
			Overhead:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
		},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"},
		}},
	}
	want := resourcehelper.PodRequests(full, resourcehelper.PodResourcesOptions{})
	out, err := trimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	got := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	if !equality.Semantic.DeepEqual(got, want) || len(p.Spec.Containers) != 1 || p.Spec.InitContainers != nil {
		t.Errorf("trimmed requests %v in %d containers, want %v in one", got, len(p.Spec.Containers), want)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.DisruptionTarget {
		t.Errorf("conditions = %+v, want DisruptionTarget only", p.Status.Conditions)
	}
	none, _ := trimPod(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause"}}}})
	if c := none.(*corev1.Pod).Spec.Containers; c != nil {
		t.Errorf("a pod that requests nothing keeps containers %+v, want none", c)
	}
}
