package execute

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"rebound/pkg/fencing"
	"rebound/pkg/rescue"
)

// TestAttackForceDeleteOnANewBoot: rows from an independent attack. The
// executor's re-read before a force delete accepts rebound's verified
// taint whatever boot the node shows now. A node back on a new boot (its
// taint held: not Ready, or an old pod remains) that falls silent again
// was proven off by nobody; a pod that tolerates the taint may run there.
func TestAttackForceDeleteOnANewBoot(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-0", UID: "p-1"}, Spec: corev1.PodSpec{NodeName: "node-3"}}
	force := rescue.Action{Kind: rescue.ActionForceDelete, Namespace: "kube-system", Name: "etcd-0", UID: "p-1", Pod: "etcd-0", Node: "node-3"}
	for _, tc := range []struct {
		name string
		boot string
		want string
	}{
		{"control: the node still shows the fenced boot b1: force-deleted", "b1", rescue.ResultSucceeded},
		{"attack: the node shows boot b2, the fence was of b1: must refuse", "b2", rescue.ResultRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := annotated(annotated(testNode(false, fenced), fencing.AnnotationFencedBoot, "b1"), fencing.AnnotationVerified, "node-3-1")
			n.Status.NodeInfo.BootID = tc.boot
			client := fake.NewSimpleClientset(pod.DeepCopy(), n)
			e := &Executor{Client: client, Component: "rebound.dev/test", Instance: "test"}
			if o := e.Apply(context.Background(), force); o.Result != tc.want {
				t.Fatalf("outcome %+v, want %s", o, tc.want)
			}
		})
	}
}
