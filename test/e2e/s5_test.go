package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/sandbox"
	"rebound/pkg/kubestatus"
)

// TestS5StatefulPodUntouchedUntilFenced: a StatefulSet pod with a
// ReadWriteOnce volume sits on node-3, which goes NotReady while (as far as
// anyone knows) its processes still run: a partition, not a crash. rebound
// must not force-delete it, however long it waits (two identical pods on one
// volume is the failure fencing exists to prevent), and must report it as
// waiting for fencing. Once the node carries node.kubernetes.io/out-of-service
// (an operator confirmed it off), the pod is rescheduled.
//
// Pods keep upstream's 300 s default toleration, so within this test only
// rebound could move the pod before the taint.
func TestS5StatefulPodUntouchedUntilFenced(t *testing.T) {
	t.Parallel()
	timings := sandbox.FastTimings()
	timings.DefaultTolerationSeconds = 300
	c := startSandbox(t, 5, timings)
	ctx := testContext(t, 5*time.Minute)
	cl := installRebound(ctx, t, c, repoPath(defaultPolicyFile))
	startController(t, c)

	createStatefulWorkload(ctx, t, cl)
	pod := waitPod(ctx, t, cl, "kube-system", "etcd-standin-0", func(p *corev1.Pod) bool {
		return p.Spec.NodeName == "node-3" && kubestatus.PodReady(p)
	})
	uid := pod.UID

	if err := c.StopNode(ctx, "node-3"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodeReady(ctx, "node-3", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	notReady := time.Now()

	// rebound reports the pod as waiting for fencing once it is stranded
	// (maxUnavailableTime 30 s)...
	var pol v1alpha1.RecoveryPolicy
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKey{Name: "default"}, &pol); err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		return pol.Status.WaitingForFencing == 1, nil
	})
	if err != nil {
		t.Fatalf("policy never reported the pod as waiting for fencing: status %+v", pol.Status)
	}
	metric(t, "s5_waiting_for_fencing_reported_after_notready", time.Since(notReady).Seconds(), "s")
	// ...and leaves it alone: 20 s more, well past the point where a
	// stateless pod would have been deleted.
	hold := time.Now().Add(20 * time.Second)
	for time.Now().Before(hold) {
		var p corev1.Pod
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "etcd-standin-0"}, &p); err != nil {
			t.Fatalf("stateful pod vanished before fencing: %v", err)
		}
		if p.UID != uid || p.DeletionTimestamp != nil {
			t.Fatalf("stateful pod touched before fencing: uid %s (was %s), deletionTimestamp %v", p.UID, uid, p.DeletionTimestamp)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	if n := len(podDeletesBy(t, c, sandbox.ReboundUser)); n != 0 {
		t.Fatalf("rebound deleted %d pods before fencing, want 0", n)
	}

	// Fence: the operator confirms node-3 is off.
	var node corev1.Node
	if err := cl.Get(ctx, client.ObjectKey{Name: "node-3"}, &node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if err := cl.Update(ctx, &node); err != nil {
		t.Fatal(err)
	}
	fenced := time.Now()
	moved := waitPod(ctx, t, cl, "kube-system", "etcd-standin-0", func(p *corev1.Pod) bool {
		return p.UID != uid && p.Spec.NodeName != "" && p.Spec.NodeName != "node-3" && kubestatus.PodReady(p)
	})
	metric(t, "s5_rescheduled_after_fencing", time.Since(fenced).Seconds(), "s")
	t.Logf("stateful pod rescheduled on %s after fencing", moved.Spec.NodeName)
}

// createStatefulWorkload creates a one-replica StatefulSet in kube-system
// whose pod mounts a ReadWriteOnce volume and prefers node-3. The volume is
// a static NFS PersistentVolume: nothing mounts it (kwok runs no
// containers), it only has to bind.
func createStatefulWorkload(ctx context.Context, t *testing.T, cl client.Client) {
	t.Helper()
	labels := map[string]string{"app": "etcd-standin"}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-standin-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "manual",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "127.0.0.1", Path: "/unused"}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: "kube-system", Name: "data-etcd-standin-0"},
		},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-standin", Namespace: "kube-system"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: "etcd-standin",
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					PriorityClassName: "system-cluster-critical",
					Containers: []corev1.Container{{
						Name: "main", Image: "registry.k8s.io/pause:3.10",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
							Weight: 100,
							Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
								Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-3"},
							}}},
						}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To("manual"),
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	for _, obj := range []client.Object{pv, sts} {
		if err := cl.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

func waitPod(ctx context.Context, t *testing.T, cl client.Client, ns, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // poll until the deadline
		}
		last = fmt.Sprintf("on %q, ready %v, uid %s, deleting %v", p.Spec.NodeName, kubestatus.PodReady(&p), p.UID, p.DeletionTimestamp != nil)
		return cond(&p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: condition not met (last: %s): %v", ns, name, last, err)
	}
	return &p
}
