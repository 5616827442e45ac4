package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
)

// TestSnapshotHoldsWhatTheTargetCheckReads: with the usage index, a pass
// reads the Ready nodes' pods from it (the cached objects, not copies) and
// the Pending pods through the node index, so that host ports, inter-pod
// anti-affinity and the room of Pending pods are decided on what the
// cluster holds, as diagnose decides them on every pod.
func TestSnapshotHoldsWhatTheTargetCheckReads(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	node := func(name string, st corev1.ConditionStatus) *corev1.Node {
		var taints []corev1.Taint
		if st != corev1.ConditionTrue {
			// kube-controller-manager's, at once.
			taints = append(taints, rescue.NotReadyTaint(st))
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourcePods: resource.MustParse("110")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}}}
	}
	withCPU := func(p *corev1.Pod, cpu string) *corev1.Pod {
		p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}
		return p
	}
	web := map[string]string{"app": "web"}
	stranded := withCPU(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "web-x", UID: "p-stranded", Labels: web,
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-3", Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: web}, TopologyKey: "kubernetes.io/hostname"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}, "100m")
	onReady := withCPU(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "web-y", UID: "p-ready", Labels: web},
		Spec: corev1.PodSpec{NodeName: "node-0"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, "100m")
	pending := withCPU(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "batch", UID: "p-pending"},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}, "950m")

	build := func(t *testing.T, pods ...*corev1.Pod) rescue.Snapshot {
		t.Helper()
		objs := []client.Object{node("node-0", corev1.ConditionTrue), node("node-3", corev1.ConditionUnknown),
			&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "web-1", UID: "rs"}},
			&v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"},
				Spec: v1alpha1.RecoveryPolicySpec{Critical: v1alpha1.CriticalSelector{Namespaces: []string{"kube-system"}}}}}
		for _, p := range pods {
			objs = append(objs, p.DeepCopy())
		}
		c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).WithIndex(&corev1.Pod{}, podNodeIndex, podNodeName).Build()
		r := newRecoveryReconciler(c, c, RecoveryOptions{})
		inf := &fakeInformer{}
		var err error
		if r.usage, err = newUsageIndex(inf); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			inf.h.OnAdd(p, true)
		}
		s, _, err := r.snapshot(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	decide := func(s rescue.Snapshot) rescue.CriticalPod {
		for _, c := range rescue.PlanFor(s).Critical {
			if c.Name == stranded.Name {
				return c
			}
		}
		t.Fatalf("%s not in the plan", stranded.Name)
		return rescue.CriticalPod{}
	}

	s := build(t, stranded, onReady, pending)
	var sawReady, sawPending bool
	for _, p := range s.Pods {
		switch p.UID {
		case onReady.UID:
			sawReady = p == onReady // the cached object itself, not a copy
		case pending.UID:
			sawPending = true
		}
	}
	if !sawReady || !sawPending {
		t.Errorf("snapshot pods: the Ready node's pod from the index %v, the Pending pod %v; want both", sawReady, sawPending)
	}
	if u := s.Usage["node-0"]; u.Pods != 1 {
		t.Errorf("usage of node-0 = %+v, want 1 pod", u)
	}
	if c := decide(s); c.Decision != rescue.DecisionNoTarget || !strings.Contains(c.Reason, "required pod anti-affinity not satisfied: 1 pod(s) in kubernetes.io/hostname=node-0") {
		t.Errorf("with a matching pod on the Ready node: %s (%s), want NoTarget for the anti-affinity", c.Decision, c.Reason)
	}

	// Without the anti-affinity pod, the Pending pod takes the room.
	if c := decide(build(t, stranded, pending)); c.Decision != rescue.DecisionNoTarget || !strings.Contains(c.Reason, "reserved for Pending pod apps/batch") {
		t.Errorf("with a Pending pod that takes the room: %s (%s), want NoTarget naming it", c.Decision, c.Reason)
	}
	if c := decide(build(t, stranded)); c.Decision != rescue.DecisionAct {
		t.Errorf("with room: %s (%s), want Act", c.Decision, c.Reason)
	}
}

// TestUsageIndexHandsOutItsPods: the pods a pass reads from the index
// follow the pod events as the sums do.
func TestUsageIndexHandsOutItsPods(t *testing.T) {
	inf := &fakeInformer{}
	u, err := newUsageIndex(inf)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(uid, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}
	onA := func(n string) bool { return n == "a" }
	inf.h.OnAdd(pod("1", "a"), true)
	inf.h.OnAdd(pod("2", "b"), true)
	moved := pod("3", "a")
	inf.h.OnAdd(moved, true)
	inf.h.OnUpdate(moved, pod("3", "b"))
	inf.h.OnDelete(pod("1", "a"))
	usage, pods := u.forNodesWithPods(nodes, onA)
	if len(pods) != 0 || usage["b"].Pods != 2 {
		t.Errorf("pods on a = %v, usage %v; want none on a, 2 on b", pods, usage)
	}
	inf.h.OnAdd(pod("4", "a"), true)
	if _, pods := u.forNodesWithPods(nodes, onA); len(pods) != 1 || pods[0].UID != "4" {
		t.Errorf("pods on a = %v, want pod 4", pods)
	}
}
