package controller

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// replicaPod is pod i of ReplicaSet rs, as the apiserver sends it: what
// the DefaultTolerationSeconds admission plugin adds, a projected token
// volume, status with container statuses.
func replicaPod(rs, i int, tolerationSeconds int64) *corev1.Pod {
	name := fmt.Sprintf("web-%d-7d4b9c5f6", rs)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%05d", name, i), GenerateName: name + "-", Namespace: "apps",
			UID: types.UID(fmt.Sprintf("pod-%d-%d", rs, i)), ResourceVersion: fmt.Sprint(1000 + i),
			Labels: map[string]string{"app": fmt.Sprintf("web-%d", rs), "pod-template-hash": "7d4b9c5f6"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name,
				UID: types.UID(fmt.Sprintf("rs-%d", rs)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: "Update", APIVersion: "v1"}},
		},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%d", i%1000),
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
			Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(tolerationSeconds)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(tolerationSeconds)},
			},
			PriorityClassName: "system-cluster-critical",
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: true, Image: "registry.k8s.io/pause:3.10"}}},
	}
}

func sharedPod(t testing.TB, parts *sharedParts, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := podTransform(parts)(p)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Pod)
}

// TestSharedPartsShareOnlyEqualParts: two replicas of one ReplicaSet get
// one instance of each part; a pod of another ReplicaSet, or with other
// toleration seconds, gets its own; and sharing changes no pod's content.
func TestSharedPartsShareOnlyEqualParts(t *testing.T) {
	parts := newSharedParts()
	a := sharedPod(t, parts, replicaPod(1, 0, 300))
	b := sharedPod(t, parts, replicaPod(1, 1, 300))
	other := sharedPod(t, parts, replicaPod(2, 0, 300))
	shorter := sharedPod(t, parts, replicaPod(1, 2, 30))

	same := func(x, y any) bool { return reflect.ValueOf(x).Pointer() == reflect.ValueOf(y).Pointer() }
	if !same(a.Labels, b.Labels) || !same(a.OwnerReferences, b.OwnerReferences) || !same(a.Spec.Tolerations, b.Spec.Tolerations) || !same(a.Spec.Containers, b.Spec.Containers) {
		t.Error("two replicas of one ReplicaSet do not share their labels, owners, tolerations and requests")
	}
	if same(a.Labels, other.Labels) || same(a.OwnerReferences, other.OwnerReferences) {
		t.Error("pods of two ReplicaSets share labels or owners")
	}
	if !same(a.Spec.Tolerations, other.Spec.Tolerations) {
		t.Error("equal default tolerations of two ReplicaSets' pods are not shared")
	}
	if same(a.Spec.Tolerations, shorter.Spec.Tolerations) || *shorter.Spec.Tolerations[0].TolerationSeconds != 30 {
		t.Errorf("tolerations of 30 s share the instance of 300 s: %+v", shorter.Spec.Tolerations)
	}
	for i, p := range []*corev1.Pod{replicaPod(1, 1, 300), replicaPod(2, 0, 300), replicaPod(1, 2, 30)} {
		alone, _ := trimPod(p)
		got := []*corev1.Pod{b, other, shorter}[i]
		if !equality.Semantic.DeepEqual(alone, got) {
			t.Errorf("pod %s: shared parts changed its content", got.Name)
		}
	}
}

// TestSharedPartsStayBounded: a table that reaches maxSharedParts starts
// afresh instead of growing with every ReplicaSet a cluster ever had.
func TestSharedPartsStayBounded(t *testing.T) {
	parts := newSharedParts()
	for rs := range maxSharedParts {
		sharedPod(t, parts, replicaPod(rs, 0, 300))
	}
	if n := len(parts.entries); n > maxSharedParts {
		t.Errorf("table holds %d entries, want at most %d", n, maxSharedParts)
	}
}

// BenchmarkTrimPodRetained reports the heap a cached pod keeps
// (bytes/pod): 20,000 pods of 1,000 ReplicaSets, decoded from JSON as the
// informer does, trimmed alone and trimmed then shared.
func BenchmarkTrimPodRetained(b *testing.B) {
	const n, perRS = 20000, 20
	raw := make([][]byte, n)
	for i := range n {
		raw[i], _ = json.Marshal(replicaPod(i/perRS, i, 300))
	}
	for _, tc := range []struct {
		name      string
		transform func() func(any) (any, error)
	}{
		{"trimmed", func() func(any) (any, error) { return trimPod }},
		{"trimmed+shared", func() func(any) (any, error) { return podTransform(newSharedParts()) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				transform := tc.transform()
				keep := make([]any, n)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := range n {
					p := &corev1.Pod{}
					if err := json.Unmarshal(raw[i], p); err != nil {
						b.Fatal(err)
					}
					keep[i], _ = transform(p)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perPod = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(keep)
			}
			b.ReportMetric(perPod, "bytes/pod")
		})
	}
}
