package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// fakeInformer hands the registered handler to the test.
type fakeInformer struct {
	h toolscache.ResourceEventHandler
}

func (f *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	f.h = h
	return nil, nil
}

// TestUsageIndexFollowsPodEvents: the index counts each pod once, on its
// current node, and takes it back when it moves, finishes or is deleted
// (also through a tombstone).
func TestUsageIndexFollowsPodEvents(t *testing.T) {
	inf := &fakeInformer{}
	u, err := newUsageIndex(inf)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(uid, node, cpu string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}, Status: corev1.PodStatus{Phase: phase}}
	}
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}
	check := func(step string, want map[string]string) {
		t.Helper()
		got := u.forNodes(nodes)
		if len(got) != len(want) {
			t.Fatalf("%s: usage %v, want %v", step, got, want)
		}
		for node, cpu := range want {
			if q := got[node].Requested[corev1.ResourceCPU]; q.Cmp(resource.MustParse(cpu)) != 0 {
				t.Errorf("%s: node %s requests %s cpu, want %s", step, node, q.String(), cpu)
			}
		}
	}
	p1, p2 := pod("1", "a", "500m", corev1.PodRunning), pod("2", "a", "250m", corev1.PodRunning)
	inf.h.OnAdd(p1, true)
	inf.h.OnAdd(p2, true)
	inf.h.OnAdd(pod("3", "", "1", corev1.PodPending), true) // not bound: counts nowhere
	check("two pods on a", map[string]string{"a": "750m"})
	if n := u.forNodes(nodes)["a"].Pods; n != 2 {
		t.Errorf("pods on a = %d, want 2", n)
	}
	inf.h.OnUpdate(p2, p2) // the same again: counted once
	check("an update without change", map[string]string{"a": "750m"})
	moved := pod("2", "b", "250m", corev1.PodRunning)
	inf.h.OnUpdate(p2, moved)
	check("pod 2 on b", map[string]string{"a": "500m", "b": "250m"})
	inf.h.OnUpdate(moved, pod("2", "b", "250m", corev1.PodSucceeded))
	check("pod 2 finished", map[string]string{"a": "500m"})
	inf.h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/p1", Obj: p1})
	check("pod 1 deleted", map[string]string{})
}
