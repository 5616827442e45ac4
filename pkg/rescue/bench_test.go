package rescue

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
	"rebound/pkg/zone"
)

// benchShape sizes a synthetic cluster.
type benchShape struct {
	nodes, pods int
	// notReadyPercent of the nodes, spread over the zones; half of those
	// already carry the unreachable taint.
	notReadyPercent int
	// criticalEvery: one Deployment in criticalEvery is critical; every
	// statefulEvery-th critical Deployment is a StatefulSet with a PVC.
	criticalEvery, statefulEvery int
	podsPerDeployment            int
}

var fullShape = benchShape{nodes: 5000, pods: 150000, notReadyPercent: 10, criticalEvery: 50, statefulEvery: 5, podsPerDeployment: 15}

// buildBenchSnapshot makes a cluster of the given shape: nodes in 3 zones,
// a kube-proxy DaemonSet pod on every node (critical, system-node-critical),
// then Deployments of podsPerDeployment pods spread over the nodes, one in
// criticalEvery of them critical (some of those StatefulSets with RWO PVCs),
// two RecoveryPolicies with full status.lastActions.
func buildBenchSnapshot(sh benchShape) Snapshot {
	now := at(10 * time.Minute)
	s := Snapshot{
		Now:        now,
		Namespaces: map[string]map[string]string{"kube-system": {"tier": "platform"}, "apps": {"tier": "apps"}},
		ZoneConfig: zone.DefaultConfig(),
	}
	zones := []string{"a", "b", "c"}
	notReadyEvery := 100 / sh.notReadyPercent
	for i := range sh.nodes {
		status, since := corev1.ConditionTrue, t0.Add(-time.Hour)
		var taints []corev1.Taint
		if i%notReadyEvery == 0 {
			status, since = corev1.ConditionUnknown, t0.Add(time.Duration(i%600)*time.Second)
			added := metav1.NewTime(since)
			taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}}
			if i%(2*notReadyEvery) == 0 {
				taints = append(taints, noExecute(corev1.TaintNodeUnreachable, since.Add(40*time.Second)))
			}
		}
		z := zones[i%len(zones)]
		s.Nodes = append(s.Nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{
				zone.LabelTopologyRegion: "r1", zone.LabelTopologyZone: z, "kubernetes.io/hostname": fmt.Sprintf("node-%05d", i)}},
			Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)},
			}},
		})
	}

	tolerations := defaultTolerations(ptr(int64(300)))
	newPod := func(ns, name, node, kind, owner string, prio string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
				Labels:          map[string]string{"app": owner, "pod-template-hash": "5d4f"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner, UID: types.UID("uid-" + kind + "-" + owner), Controller: ptr(true)}}},
			Spec:   corev1.PodSpec{NodeName: node, PriorityClassName: prio, Tolerations: tolerations},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	for i := range sh.nodes {
		s.Pods = append(s.Pods, newPod("kube-system", fmt.Sprintf("kube-proxy-%05d", i), s.Nodes[i].Name, "DaemonSet", "kube-proxy", "system-node-critical"))
	}

	for d := 0; len(s.Pods) < sh.pods; d++ {
		ns, prio, kind := "apps", "", "ReplicaSet"
		critical := d%sh.criticalEvery == 0
		stateful := critical && (d/sh.criticalEvery)%sh.statefulEvery == 0
		if critical {
			ns, prio = "kube-system", "system-cluster-critical"
		}
		name := fmt.Sprintf("app-%05d", d)
		owner := name
		if stateful {
			kind = "StatefulSet"
		} else {
			owner = name + "-5d4f"
			replicas := int32(sh.podsPerDeployment)
			s.Deployments = append(s.Deployments, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-Deployment-" + name)},
				Spec:       appsv1.DeploymentSpec{Replicas: &replicas},
				Status:     appsv1.DeploymentStatus{AvailableReplicas: replicas - 2},
			})
			// The current ReplicaSet and an old, scaled-down one, as
			// revisionHistoryLimit keeps them.
			for _, hash := range []string{"5d4f", "77aa"} {
				rsReplicas := replicas
				if hash == "77aa" {
					rsReplicas = 0
				}
				s.ReplicaSets = append(s.ReplicaSets, &appsv1.ReplicaSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + hash, UID: types.UID("uid-ReplicaSet-" + name + "-" + hash),
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: types.UID("uid-Deployment-" + name), Controller: ptr(true)}}},
					Spec: appsv1.ReplicaSetSpec{Replicas: &rsReplicas},
				})
			}
		}
		for k := 0; k < sh.podsPerDeployment && len(s.Pods) < sh.pods; k++ {
			node := s.Nodes[(d*7+k*131)%sh.nodes].Name
			pod := newPod(ns, fmt.Sprintf("%s-%d", name, k), node, kind, owner, prio)
			if stateful {
				claim := fmt.Sprintf("data-%s-%d", name, k)
				pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
				s.PVCs = append(s.PVCs, &corev1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim},
					Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
				})
			}
			s.Pods = append(s.Pods, pod)
		}
	}

	var records []v1alpha1.ActionRecord
	for i := range 10 {
		records = append(records, record(v1alpha1.RecordedDeleteAndReplace, fmt.Sprintf("kube-system/old-%d", i), now.Add(-time.Duration(i)*10*time.Second)))
	}
	s.Policies = []*v1alpha1.RecoveryPolicy{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "default"},
			Spec: v1alpha1.RecoveryPolicySpec{
				Critical: v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"},
					PriorityClassNames: []string{"system-cluster-critical", "system-node-critical"}},
				Limits: v1alpha1.Limits{MaxActionsPerMinute: 100, MaxConcurrent: 50},
			},
			Status: v1alpha1.RecoveryPolicyStatus{LastActions: records},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "platform"},
			Spec: v1alpha1.RecoveryPolicySpec{
				Critical: v1alpha1.CriticalSelector{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}},
					PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "app", Operator: metav1.LabelSelectorOpExists}}},
				},
				DryRun: true,
			},
		},
	}
	return s
}

// TestBenchSnapshotShape checks, at a tenth of the size, that the benchmark
// exercises every path rather than measuring an empty loop.
func TestBenchSnapshotShape(t *testing.T) {
	sh := fullShape
	sh.nodes, sh.pods = 500, 15000
	s := buildBenchSnapshot(sh)
	s.Policies[0].Spec.Limits.MaxConcurrent = 10
	p := PlanFor(s)
	count := map[Decision]int{}
	for _, c := range p.Critical {
		count[c.Decision]++
	}
	for _, d := range []Decision{DecisionSkip, DecisionAct, DecisionWaitingForFencing, DecisionRateLimited} {
		if count[d] == 0 {
			t.Errorf("no pod with decision %s: %v", d, count)
		}
	}
	if len(p.Zones.Zones) != 3 {
		t.Errorf("zones = %d, want 3", len(p.Zones.Zones))
	}
	t.Logf("decisions %v, %d actions", count, len(p.Actions))
}

// BenchmarkPlan measures one full plan at 5,000 nodes (3 zones, 10%
// NotReady) and 150,000 pods (~8,000 critical: kube-proxy on every node,
// 200 critical Deployments and StatefulSets).
func BenchmarkPlan(b *testing.B) {
	s := buildBenchSnapshot(fullShape)
	b.ReportAllocs()
	var p Plan
	for b.Loop() { // b.Loop times only the loop, not the build above
		p = PlanFor(s)
	}
	b.ReportMetric(float64(len(p.Critical)), "critical/op")
	b.ReportMetric(float64(len(p.Actions)), "actions/op")
}
