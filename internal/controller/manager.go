// Package controller wires rebound's pure planners (pkg/rescue,
// pkg/peering) to the API through controller-runtime: gather a snapshot
// from the informer caches, plan, apply, requeue at the plan's next check.
package controller

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	resourcehelper "k8s.io/component-helpers/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"rebound/api/v1alpha1"
	"rebound/internal/metricsserving"
	"rebound/pkg/rescue"
)

// Scheme knows the Kubernetes built-in types and rebound's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// ManagerOptions are the process-level settings of `rebound controller`.
type ManagerOptions struct {
	// Metrics is where and how /metrics is served (package
	// metricsserving: HTTPS behind authentication and authorization unless
	// Insecure).
	Metrics    metricsserving.Config
	HealthAddr string
	// LeaderElect makes one replica of several act; the others wait.
	LeaderElect             bool
	LeaderElectionNamespace string
	// SyncPeriod re-lists everything now and then, as a safety net.
	SyncPeriod time.Duration
}

// NewManager builds a manager whose caches hold only what the planners
// read: managed fields are dropped from every object, and every cached
// kind is trimmed further (see cacheByObject in cache.go), which is what
// keeps memory flat in clusters of 150,000 pods.
func NewManager(cfg *rest.Config, opts ManagerOptions) (ctrl.Manager, error) {
	sync := opts.SyncPeriod
	if cfg.QPS == 0 {
		// client-go's default of 5 requests per second would serialise a
		// rescue of hundreds of pods over minutes; like controller-runtime's
		// own GetConfig, leave the pacing to the apiserver's priority and
		// fairness.
		cfg = rest.CopyConfig(cfg)
		cfg.QPS = -1
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        Scheme(),
		Metrics:                       opts.Metrics.Options(),
		HealthProbeBindAddress:        opts.HealthAddr,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              "rebound-controller",
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			SyncPeriod:       &sync,
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         cacheByObject(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	// The first lists carry every object as the API sends it, before the
	// transforms trim it: at 20,000 pods a few hundred MiB that are garbage
	// once the caches hold the trimmed copies. Hand that memory back to
	// the OS at once, not over the runtime scavenger's minutes, so that
	// the process's RSS is its working set from the start.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			debug.FreeOSMemory()
		}
		return nil
	})); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// trimPod keeps what pkg/rescue reads of a pod: identity, owners, labels,
// the mirror annotation, node, tolerations, PVC and generic ephemeral
// volumes (both can make a pod stateful: dropping the ephemeral ones made
// the controller call Stateless what diagnose, reading the full pod, calls
// WaitingForFencing), priority class, conditions, and what the target check
// needs: nodeSelector, required node affinity and the containers' resource
// requests. Images, env, probes and status details are dropped.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	if pod.Annotations != nil {
		if v, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
			pod.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: v}
		} else {
			pod.Annotations = nil
		}
	}
	var volumes []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		case v.Ephemeral != nil:
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: v.Ephemeral}})
		case rescue.ExclusiveInlineVolume(&v) != "":
			// An inline disk or LUN makes the pod exclusive; rare, and
			// small enough to keep whole.
			volumes = append(volumes, v)
		}
	}
	pod.Spec = corev1.PodSpec{
		NodeName:                      pod.Spec.NodeName,
		NodeSelector:                  pod.Spec.NodeSelector,
		Affinity:                      requiredAffinity(pod.Spec.Affinity),
		Tolerations:                   pod.Spec.Tolerations,
		Volumes:                       volumes,
		PriorityClassName:             pod.Spec.PriorityClassName,
		TerminationGracePeriodSeconds: pod.Spec.TerminationGracePeriodSeconds,
		Containers:                    requestsOnly(pod),
		SchedulingGates:               pod.Spec.SchedulingGates,
	}
	pod.Status = corev1.PodStatus{Phase: pod.Status.Phase, Conditions: disruptionTargetOnly(pod.Status.Conditions)}
	return pod, nil
}

// requestsOnly is one container that requests what the scheduler counts
// for the whole pod (component-helpers' PodRequests: containers, init
// containers and sidecars, overhead, pod-level resources), so that
// PodRequests of the trimmed pod is the same, and that takes the pod's
// host ports (rescue.HostPorts: containers and sidecars); none when it
// requests nothing and takes no host port. A container is the biggest
// part of a cached pod, and at 20,000 pods every byte of it counts.
func requestsOnly(pod *corev1.Pod) []corev1.Container {
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	ports := rescue.HostPorts(pod)
	if len(req) == 0 && len(ports) == 0 {
		return nil
	}
	c := corev1.Container{Name: "requests", Ports: ports}
	if len(req) > 0 {
		c.Resources.Requests = req
	}
	return []corev1.Container{c}
}

// requiredAffinity keeps the required terms the target check reads: node
// affinity, and inter-pod affinity and anti-affinity (kube-scheduler's
// filters); the preferred ones only score nodes.
func requiredAffinity(a *corev1.Affinity) *corev1.Affinity {
	if a == nil {
		return nil
	}
	var out corev1.Affinity
	if a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		out.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}
	}
	if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		out.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution}
	}
	if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		out.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution}
	}
	if out == (corev1.Affinity{}) {
		return nil
	}
	return &out
}

// disruptionTargetOnly keeps the one pod condition the planner reads:
// DisruptionTarget, which names the upstream controller that deleted a pod.
func disruptionTargetOnly(conds []corev1.PodCondition) []corev1.PodCondition {
	for _, c := range conds {
		if c.Type == corev1.DisruptionTarget {
			return []corev1.PodCondition{c}
		}
	}
	return nil
}

// trimNode drops the parts of a node no planner reads; the image list
// alone can be tens of kilobytes per node.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	node.ManagedFields = nil
	node.Status.Images = nil
	node.Status.VolumesAttached = nil
	node.Status.VolumesInUse = nil
	return node, nil
}
