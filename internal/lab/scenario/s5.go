package scenario

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
)

// S5 is a partition, not a crash: a StatefulSet pod with a ReadWriteOnce
// volume sits on a node that goes NotReady while, as far as anyone knows,
// its processes still run. rebound must not move it (two pods on one
// volume is what fencing prevents) until the node carries
// node.kubernetes.io/out-of-service (an operator confirmed it off); then it
// is rescheduled. The caller runs rebound; the runner plays the rest.

// S5Options tune S5.
type S5Options struct {
	// Node is where the stateful pod runs and what is partitioned.
	Node string
	// Reported, if set, waits until rebound reports the pod as waiting
	// for fencing (a hook: the test reads the policy's status).
	Reported func(ctx context.Context) error
	// Hold is how long, once reported, the pod must stay untouched before
	// the node is fenced.
	Hold time.Duration
}

// S5Result is what S5 found.
type S5Result struct {
	NotReadyAt time.Duration `json:"notReadyAt"`
	ReportedAt time.Duration `json:"reportedAt"`
	// FencedAt is when the out-of-service taint was added (its
	// timeAdded), MovedOn where the new pod runs, and MovedSeconds the
	// time from the taint's timeAdded to the new pod's Ready
	// lastTransitionTime.
	FencedAt     time.Time `json:"fencedAt"`
	MovedOn      string    `json:"movedOn"`
	MovedSeconds float64   `json:"movedSeconds"`
}

// S5Pod is the stateful pod S5 watches.
const S5Pod = "etcd-standin-0"

// RunS5 plays S5 on a running sandbox with rebound running.
func RunS5(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S5Options) (S5Result, error) {
	var res S5Result
	uid, err := PartitionS5(ctx, c, tl, opts.Node)
	if err != nil {
		return res, err
	}
	res.NotReadyAt = tl.Since()
	if opts.Reported != nil {
		if err := opts.Reported(ctx); err != nil {
			return res, err
		}
		res.ReportedAt = tl.Since()
		tl.Step("rebound reports %s waiting for fencing", S5Pod)
	}

	tl.Step("hold %s: the pod must stay untouched", opts.Hold)
	deadline := time.Now().Add(opts.Hold)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, opts.Hold+time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("kube-system").Get(ctx, S5Pod, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("S5: stateful pod vanished before fencing: %w", err)
		}
		if p.UID != uid || p.DeletionTimestamp != nil {
			return false, fmt.Errorf("S5: stateful pod touched before fencing: uid %s (was %s), deletionTimestamp %v", p.UID, uid, p.DeletionTimestamp)
		}
		return !time.Now().Before(deadline), nil
	})
	if err != nil {
		return res, err
	}

	tl.Step("fence %s: taint node.kubernetes.io/out-of-service (an operator confirmed it off)", opts.Node)
	n, err := c.Client.CoreV1().Nodes().Get(ctx, opts.Node, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	now := metav1.Now()
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
	if n, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		return res, err
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService && t.TimeAdded != nil {
			res.FencedAt = t.TimeAdded.Time
		}
	}
	moved, err := waitPod(ctx, c, 2*time.Minute, func(p *corev1.Pod) bool {
		return p.UID != uid && p.Spec.NodeName != "" && p.Spec.NodeName != opts.Node && kubestatus.PodReady(p)
	})
	if err != nil {
		return res, err
	}
	_, readySince := kubestatus.PodReadySince(moved)
	res.MovedOn, res.MovedSeconds = moved.Spec.NodeName, readySince.Sub(res.FencedAt).Seconds()
	tl.Step("%s rescheduled on %s, Ready %.1fs after the fencing taint", S5Pod, res.MovedOn, res.MovedSeconds)
	return res, nil
}

// PartitionS5 is S5's first half: the stateful pod Ready on node, then node
// partitioned and NotReady. It returns the pod's UID. TestDiagnoseS5
// stops there and asks diagnose.
func PartitionS5(ctx context.Context, c *sandbox.Cluster, tl *Timeline, node string) (types.UID, error) {
	uid, err := placeStatefulStandIn(ctx, c, tl, node)
	if err != nil {
		return "", err
	}
	tl.Step("partition %s (heartbeats stop; its processes may still run)", node)
	if err := c.StopNode(ctx, node); err != nil {
		return "", err
	}
	if err := c.WaitNodeReady(ctx, node, false, time.Minute); err != nil {
		return "", err
	}
	tl.Step("%s NotReady", node)
	return uid, nil
}

func waitPod(ctx context.Context, c *sandbox.Cluster, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	return waitPodNamed(ctx, c, S5Pod, timeout, cond)
}

func waitPodNamed(ctx context.Context, c *sandbox.Cluster, name string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var p *corev1.Pod
	last := "not found"
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Pods("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // poll until the deadline
		}
		p = got
		last = fmt.Sprintf("on %q, ready %v, uid %s, deleting %v", p.Spec.NodeName, kubestatus.PodReady(p), p.UID, p.DeletionTimestamp != nil)
		return cond(p), nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod kube-system/%s: condition not met (last: %s): %w", name, last, err)
	}
	return p, nil
}

// createStatefulStandIn creates a one-replica StatefulSet in kube-system
// whose pod mounts a ReadWriteOnce volume and prefers node. The volume is a
// static NFS PersistentVolume: nothing mounts it (kwok runs no
// containers), it only has to bind.
func createStatefulStandIn(ctx context.Context, c *sandbox.Cluster, node string) error {
	return createStatefulSet(ctx, c, "etcd-standin", node)
}

// createStatefulSet creates a one-replica StatefulSet name, as
// createStatefulStandIn describes; its pod is name-0.
func createStatefulSet(ctx context.Context, c *sandbox.Cluster, name, node string) error {
	labels := map[string]string{"app": name}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "manual",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "127.0.0.1", Path: "/unused"}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: "kube-system", Name: "data-" + name + "-0"},
		},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					PriorityClassName: "system-cluster-critical",
					Containers: []corev1.Container{{
						Name: "main", Image: "registry.k8s.io/pause:3.10",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Affinity: preferNode(node),
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
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PersistentVolume %s: %w", pv.Name, err)
	}
	if _, err := c.Client.AppsV1().StatefulSets("kube-system").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create StatefulSet kube-system/%s: %w", sts.Name, err)
	}
	return nil
}
