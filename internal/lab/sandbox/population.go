package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Population is the workload of a large sandbox: a DaemonSet pod on every
// node and a few hundred Deployments, some of them critical, for about
// PodsPerNode pods per node in all.
type Population struct {
	// PodsPerNode counts the DaemonSet's pod; 20 gives 20,000 pods on
	// 1,000 nodes.
	PodsPerNode int
	// ReplicasPerDeployment sizes each Deployment; their number follows.
	ReplicasPerDeployment int
	// CriticalEvery makes every n-th Deployment critical
	// (kube-system, system-cluster-critical); 0 means none.
	CriticalEvery int
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

// BinderScheduler is the schedulerName of the population's Deployments:
// Populate binds their pods itself, round-robin over the nodes, with one
// binding request each. kube-scheduler filters and scores every node for
// every pod; at 1,000 nodes and 20,000 pods on 2 shared cores that, not
// the apiserver, is what paced the start-up (measured: ~2 pods/s at 300
// nodes). The DaemonSet and every other workload keep kube-scheduler.
const BinderScheduler = "sandbox-round-robin"

// PopulationNamespace holds the non-critical Deployments.
const PopulationNamespace = "scale"

// PopulationResult says what Populate created and how long it took.
type PopulationResult struct {
	Deployments int
	Critical    int
	Pods        int // running pods seen at the end
	Took        time.Duration
}

// Populate creates the workload with an unthrottled parallel client and
// waits until the pods are Running (kwok runs them). The controller
// manager must have raised API rates (LargeExtraArgs), or it, not the
// apiserver, paces the start.
func (c *Cluster) Populate(ctx context.Context, p Population) (PopulationResult, error) {
	if p.PodsPerNode < 1 {
		return PopulationResult{}, fmt.Errorf("sandbox: population: pods per node must be at least 1 (the DaemonSet's), got %d", p.PodsPerNode)
	}
	if p.ReplicasPerDeployment < 1 {
		p.ReplicasPerDeployment = 64
	}
	progress := p.Progress
	if progress == nil {
		progress = io.Discard
	}
	t0 := time.Now()
	cl, err := c.bulkClient()
	if err != nil {
		return PopulationResult{}, err
	}
	nodes := len(c.NodeNames)
	want := nodes * p.PodsPerNode
	deployPods := want - nodes
	count := (deployPods + p.ReplicasPerDeployment - 1) / p.ReplicasPerDeployment
	res := PopulationResult{Deployments: count}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: PopulationNamespace}}
	if _, err := cl.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, fmt.Errorf("sandbox: population: %w", err)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "node-agent"}},
			Template: podTemplate("node-agent", "system-node-critical"),
		},
	}
	if _, err := cl.AppsV1().DaemonSets("kube-system").Create(ctx, ds, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, fmt.Errorf("sandbox: population: create DaemonSet: %w", err)
	}
	go c.bindRoundRobin(ctx, cl)
	err = Parallel(ctx, count, createParallelism, func(ctx context.Context, i int) error {
		replicas := min(p.ReplicasPerDeployment, deployPods-i*p.ReplicasPerDeployment)
		name, namespace, class := fmt.Sprintf("filler-%d", i), PopulationNamespace, ""
		if p.CriticalEvery > 0 && i%p.CriticalEvery == 0 {
			name, namespace, class = fmt.Sprintf("critical-%d", i), "kube-system", "system-cluster-critical"
		}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(replicas)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: podTemplate(name, class),
			},
		}
		d.Spec.Template.Spec.SchedulerName = BinderScheduler
		if _, err := cl.AppsV1().Deployments(namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("sandbox: population: create Deployment %s/%s: %w", namespace, name, err)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if p.CriticalEvery > 0 {
		res.Critical = (count + p.CriticalEvery - 1) / p.CriticalEvery
	}
	fmt.Fprintf(progress, "  created a DaemonSet and %d Deployments (%d critical) for %d pods in %s\n", count, res.Critical, want, time.Since(t0).Round(time.Second))

	// Pods come from the controller-manager and run on kwok; count the
	// Running ones until all are there.
	timeout := 5*time.Minute + time.Duration(want)*30*time.Millisecond
	last := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 5*time.Second, timeout, false, func(ctx context.Context) (bool, error) {
		n, err := c.RunningPods(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // keep polling through apiserver hiccups
		}
		res.Pods = n
		if time.Since(last) > 30*time.Second {
			fmt.Fprintf(progress, "  %d/%d pods running after %s\n", n, want, time.Since(t0).Round(time.Second))
			last = time.Now()
		}
		return n >= want, nil
	})
	res.Took = time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("sandbox: population: %d of %d pods running after %s: %w", res.Pods, want, res.Took.Round(time.Second), err)
	}
	fmt.Fprintf(progress, "  %d pods running after %s\n", res.Pods, res.Took.Round(time.Second))
	return res, nil
}

// RunningPods counts the cluster's Running pods, paging through the list
// so that no single response holds tens of thousands of pods.
func (c *Cluster) RunningPods(ctx context.Context) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 2000, FieldSelector: "status.phase=Running"}
	for {
		list, err := c.Client.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return 0, err
		}
		n += len(list.Items)
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}

func podTemplate(app, priorityClass string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			PriorityClassName: priorityClass,
			// kwok never pulls images; the name only has to be valid.
			Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
	}
}

// LargeExtraArgs raise the API rates of the controller-manager for a
// sandbox of many nodes and pods: at its default (20 requests per second)
// creating 20,000 pods takes a quarter of an hour of client-side waiting.
// (The scheduler's rates are in its configuration, schedulerConfig.)
func LargeExtraArgs() map[string][]string {
	return map[string][]string{
		ControllerManager: {"--kube-api-qps=300", "--kube-api-burst=600", "--concurrent-replicaset-syncs=10", "--concurrent-deployment-syncs=10"},
	}
}

// bindRoundRobin binds pending pods of BinderScheduler to the nodes in
// turn until ctx ends, as a scheduler with no filter and no score would.
func (c *Cluster) bindRoundRobin(ctx context.Context, cl kubernetes.Interface) {
	next := 0
	for ctx.Err() == nil {
		list, err := cl.CoreV1().Pods("").List(ctx, metav1.ListOptions{
			FieldSelector: "spec.schedulerName=" + BinderScheduler + ",spec.nodeName=",
			Limit:         2000,
		})
		if err == nil && len(list.Items) > 0 {
			pods := list.Items
			start := next
			next += len(pods)
			_ = Parallel(ctx, len(pods), createParallelism, func(ctx context.Context, i int) error {
				p := &pods[i]
				node := c.NodeNames[(start+i)%len(c.NodeNames)]
				b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
					Target: corev1.ObjectReference{Kind: "Node", Name: node}}
				// A pod bound meanwhile or gone is no error: the next list
				// no longer has it.
				_ = cl.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{})
				return nil
			})
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
