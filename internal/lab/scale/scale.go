// Package scale measures the live recovery controller on a large sandbox:
// its memory and CPU at rest and during a rescue, its API requests at
// rest, how late it deletes stranded pods after their policy deadline, and
// how long a planning pass takes. `rebound-bench scale` prints what Run
// measures; test/e2e's TestScaleSmall runs it at a small size and asserts
// on it.
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
)

// VictimLabel marks the nodes that die in the rescue; the rescued
// Deployments prefer them, so their pods are stranded when they die.
const VictimLabel = "scale.rebound.dev/victim"

// rescueNamespace is the i-th namespace of rescued Deployments; each has
// its own RecoveryPolicy (see Options.Policies).
func rescueNamespace(i int) string { return fmt.Sprintf("rescue-%d", i) }

// Options of one measured run.
type Options struct {
	Nodes int
	// Victims is how many nodes die (default: 100, or 60% of a smaller
	// cluster); they all sit in zone-a, which is sized so that their death
	// puts it in PartialDisruption (see Layout).
	Victims int
	// CriticalPods are single-replica critical Deployments placed on the
	// victims (default 200).
	CriticalPods int
	// PodsPerNode is the rest of the workload (see sandbox.Population).
	PodsPerNode int
	// Steady is how long the idle controller is watched (default 1m).
	Steady time.Duration
	// Policies spread the critical pods over that many namespaces, each
	// with its RecoveryPolicy (default 20, 10 pods each at 200). In a
	// controller's first minute one policy takes at most 10 actions a
	// minute whatever its maxActionsPerMinute (status.lastActions keeps
	// 10 records; pkg/rescue/limits.go); after it, the controller's
	// ledger counts exactly. With 1 or 2 policies a rescue right after
	// the controller starts measures that cap.
	Policies int
	// MaxUnavailable is the policies' maxUnavailableTime (default 10s).
	MaxUnavailable time.Duration
	// Peering also measures the peering controller and one agent's
	// traffic with every node reporting (MeasurePeering), for
	// PeeringWindow (default 1m), before the rescue.
	Peering       bool
	PeeringWindow time.Duration
	// LeasePlane runs the controller with --lease-plane (its Lease
	// informer and its rules at a stall's edges), so that its cost on the
	// rescue is measured.
	LeasePlane bool
	// ReboundBin is the `rebound` binary to run as the controller.
	ReboundBin string
	Progress   io.Writer
}

func (o *Options) setDefaults() {
	if o.Victims == 0 {
		o.Victims = min(100, int(math.Ceil(float64(o.Nodes)*0.6)))
	}
	if o.CriticalPods == 0 {
		o.CriticalPods = 200
	}
	if o.PodsPerNode == 0 {
		o.PodsPerNode = 20
	}
	if o.PeeringWindow == 0 {
		o.PeeringWindow = time.Minute
	}
	if o.Policies == 0 {
		o.Policies = 20
	}
	if o.Steady == 0 {
		o.Steady = time.Minute
	}
	if o.MaxUnavailable == 0 {
		o.MaxUnavailable = 10 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Layout sizes three zones for nodes of which victims die: zone-a holds the
// victims and enough others that they are 70% of it (upstream's
// PartialDisruption threshold is 55%), the other zones share the rest.
func Layout(nodes, victims int) ([]int, error) {
	a := int(math.Ceil(float64(victims) / 0.7))
	if victims < 3 || a >= nodes-1 {
		return nil, fmt.Errorf("scale: %d victims of %d nodes leave no room for healthy zones (need victims >= 3 and nodes > %d)", victims, nodes, a+1)
	}
	rest := nodes - a
	return []int{a, rest - rest/2, rest / 2}, nil
}

// SandboxOptions are the sandbox options a run of o needs: the zone
// layout, raised API rates for the controller-manager and scheduler, and
// tolerations of 300 s so that upstream eviction never moves the stranded
// pods before rebound would.
func SandboxOptions(o Options, timings sandbox.Timings) (sandbox.Options, error) {
	o.setDefaults()
	sizes, err := Layout(o.Nodes, o.Victims)
	if err != nil {
		return sandbox.Options{}, err
	}
	timings.DefaultTolerationSeconds = 300
	return sandbox.Options{Nodes: o.Nodes, ZoneSizes: sizes, Timings: timings, ExtraArgs: sandbox.LargeExtraArgs()}, nil
}

// Result is what Run measured.
type Result struct {
	Nodes      int                       `json:"nodes"`
	Pods       int                       `json:"pods"`
	Population sandbox.PopulationResult  `json:"population"`
	Components map[string]ComponentUsage `json:"components"`

	SteadyRSSMiB float64 `json:"steadyRssMiB"`
	PeakRSSMiB   float64 `json:"peakRssMiB"`
	// StartupPeakRSSMiB is the peak before the rescue: the first lists.
	StartupPeakRSSMiB float64  `json:"startupPeakRssMiB"`
	CPUPerMin         float64  `json:"cpuSecondsPerMin"`
	Idle              Requests `json:"idle"`
	// IdlePasses counts planning passes while idle: each costs a read of
	// the stop switch.
	IdlePasses int `json:"idlePasses"`
	// IdleTriggers counts, by kind, the watch events that asked for a
	// pass while idle (rebound_recovery_triggers_total): what starts the
	// idle passes.
	IdleTriggers map[string]int `json:"idleTriggers"`

	Stranded int `json:"stranded"`
	Deleted  int `json:"deleted"`
	// Repeated counts deletes of a pod rebound had already deleted.
	Repeated int `json:"repeated"`
	// DeadlineToDelete is, per deleted pod, seconds from its policy
	// deadline (node Ready lastTransitionTime + maxUnavailableTime) to
	// the apiserver's completion of rebound's delete.
	DeadlineToDelete []float64 `json:"deadlineToDelete"`
	// Latest is the pod deleted latest after its deadline, to look up in
	// the controller's log.
	Latest string  `json:"latest"`
	P50    float64 `json:"deadlineToDeleteP50"`
	P99    float64 `json:"deadlineToDeleteP99"`
	// OwnDeadlineToDelete is, per deleted pod, seconds from rebound's own
	// deadline (its first sight of the node's NotReady plus
	// maxUnavailableTime, as its log of the action says) to the
	// apiserver's completion of the delete: what rebound adds itself,
	// without the watch's delivery of the NotReady and the API's
	// whole-second transition times.
	OwnDeadlineToDelete []float64 `json:"ownDeadlineToDelete"`
	OwnLatest           string    `json:"ownLatest"`
	OwnP50              float64   `json:"ownDeadlineToDeleteP50"`
	OwnP99              float64   `json:"ownDeadlineToDeleteP99"`
	// PassMs is the mean planning pass (snapshot + plan) during the
	// rescue, from rebound_plan_duration_seconds; Passes how many ran.
	PassMs float64 `json:"passMs"`
	Passes int     `json:"passes"`

	Peering *PeeringResult `json:"peering,omitempty"`
}

// ComponentUsage is a sandbox process's memory and CPU while the
// controller was idle: what the sandbox itself costs at this size.
type ComponentUsage struct {
	RSSMiB    float64 `json:"rssMiB"`
	CPUPerMin float64 `json:"cpuSecondsPerMin"`
}

// Run measures the controller on a sandbox started with SandboxOptions(o).
func Run(ctx context.Context, c *sandbox.Cluster, o Options) (Result, error) {
	o.setDefaults()
	res := Result{Nodes: len(c.NodeNames)}
	say := func(format string, args ...any) { fmt.Fprintf(o.Progress, format+"\n", args...) }
	if o.Victims >= len(c.NodeNames) {
		return res, fmt.Errorf("scale: %d victims of %d nodes", o.Victims, len(c.NodeNames))
	}
	victims := c.NodeNames[1 : 1+o.Victims] // node-0 is in zone-a and survives

	cl, err := Install(ctx, c)
	if err != nil {
		return res, err
	}
	if err := installPolicies(ctx, c, cl, o); err != nil {
		return res, err
	}
	if err := labelVictims(ctx, c, victims); err != nil {
		return res, err
	}
	pop, err := c.Populate(ctx, sandbox.Population{PodsPerNode: o.PodsPerNode, CriticalEvery: 10, Progress: o.Progress})
	res.Population = pop
	if err != nil {
		return res, err
	}
	say("  creating %d critical Deployments on %d victim nodes", o.CriticalPods, len(victims))
	if err := createRescued(ctx, c, o.CriticalPods, o.Policies); err != nil {
		return res, err
	}
	if res.Pods, err = c.RunningPods(ctx); err != nil {
		return res, err
	}

	// JSON, so that the rescue actions' own deadlines can be read back
	// (ownDeadlines).
	args := []string{"--leader-elect", "--log-format", "json"}
	if o.LeasePlane {
		if err := install.DetectionFor(ctx, cl, "rebound-scale", sandbox.ReboundUser); err != nil {
			return res, err
		}
		args = append(args, "--lease-plane")
	}
	ctl, err := StartController(c, o.ReboundBin, "rebound-controller-scale", args...)
	if err != nil {
		return res, err
	}
	defer ctl.Signal(syscall.SIGTERM)
	if err := ctl.WaitReady(ctx, 3*time.Minute); err != nil {
		return res, err
	}
	// The first passes write the policies' status; rest means after them.
	if err := sleep(ctx, 15*time.Second); err != nil {
		return res, err
	}
	say("  controller ready; watching it idle for %s", o.Steady)
	comps := componentPIDs(c)
	idle0, err := ctl.Metric(ctx, "rebound_plan_duration_seconds_count")
	if err != nil {
		return res, fmt.Errorf("read the controller's metrics: %w", err)
	}
	triggers0 := ctl.Triggers(ctx)
	before, _ := SampleProc(ctl.PID)
	compBefore := sampleAll(comps)
	if err := sleep(ctx, o.Steady); err != nil {
		return res, err
	}
	after, _ := SampleProc(ctl.PID)
	idle1, err := ctl.Metric(ctx, "rebound_plan_duration_seconds_count")
	if err != nil {
		return res, fmt.Errorf("read the controller's metrics: %w", err)
	}
	res.IdlePasses = int(idle1 - idle0)
	res.IdleTriggers = map[string]int{}
	for kind, n := range ctl.Triggers(ctx) {
		if d := int(n - triggers0[kind]); d > 0 {
			res.IdleTriggers[kind] = d
		}
	}
	res.Components = usage(compBefore, sampleAll(comps))
	res.SteadyRSSMiB, res.CPUPerMin = after.RSSMiB, CPUPerMinute(before, after)
	if res.Idle, err = CountRequests(c, sandbox.ReboundUser, before.At, after.At); err != nil {
		return res, err
	}

	if o.Peering {
		pr, err := MeasurePeering(ctx, c, o.ReboundBin, o.PeeringWindow, o.Progress)
		if err != nil {
			return res, fmt.Errorf("peering: %w", err)
		}
		res.Peering = &pr
	}

	stranded, err := strandedPods(ctx, c, victims, o.Policies)
	if err != nil {
		return res, err
	}
	res.Stranded = len(stranded)
	sum0, err0 := ctl.Metric(ctx, "rebound_plan_duration_seconds_sum")
	n0, err1 := ctl.Metric(ctx, "rebound_plan_duration_seconds_count")
	if err := errors.Join(err0, err1); err != nil {
		return res, fmt.Errorf("read the controller's metrics: %w", err)
	}
	// The start-up's peak (the first lists, every object as the API sent
	// it before the transforms trimmed it) is its own figure; the rescue's
	// peak counts from here.
	if s, err := SampleProc(ctl.PID); err == nil {
		res.StartupPeakRSSMiB = s.PeakMiB
	}
	if err := ResetPeak(ctl.PID); err != nil {
		return res, fmt.Errorf("reset the controller's peak RSS: %w", err)
	}
	say("  stopping %d nodes in zone-a with %d stranded critical pods", len(victims), len(stranded))
	// Cordoned first: a victim whose heartbeats stopped still looks Ready
	// until its grace period ends, and a replacement scheduled there would
	// be stranded again. Where replacements land is not what this measures.
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	err = sandbox.Parallel(ctx, len(victims), 16, func(ctx context.Context, i int) error {
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, victims[i], types.StrategicMergePatchType, cordon, metav1.PatchOptions{}); err != nil {
			return err
		}
		return c.StopNode(ctx, victims[i])
	})
	if err != nil {
		return res, err
	}
	timeout := c.Timings.NodeMonitorGracePeriod + o.MaxUnavailable + 5*time.Minute
	var deletes map[string][]sandbox.AuditEvent
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, false, func(context.Context) (bool, error) {
		deletes, err = podDeletes(c)
		if err != nil {
			return false, err
		}
		for key := range stranded {
			if len(deletes[key]) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	for key := range stranded {
		if d := deletes[key]; len(d) > 0 {
			res.Deleted++
			res.Repeated += len(d) - 1
		}
	}
	if err != nil {
		return res, fmt.Errorf("scale: rebound deleted %d of %d stranded pods within %s: %w (log %s)", res.Deleted, len(stranded), timeout, err, ctl.Log)
	}
	end, _ := SampleProc(ctl.PID)
	res.PeakRSSMiB = end.PeakMiB
	sum1, err0 := ctl.Metric(ctx, "rebound_plan_duration_seconds_sum")
	n1, err1 := ctl.Metric(ctx, "rebound_plan_duration_seconds_count")
	if err := errors.Join(err0, err1); err != nil {
		return res, fmt.Errorf("read the controller's metrics: %w", err)
	}
	if res.Passes = int(n1 - n0); res.Passes > 0 {
		res.PassMs = (sum1 - sum0) / (n1 - n0) * 1000
	}

	since, err := notReadySince(ctx, c, victims)
	if err != nil {
		return res, err
	}
	for key, node := range stranded {
		d := deletes[key]
		if len(d) == 0 || since[node].IsZero() {
			continue
		}
		deadline := since[node].Add(o.MaxUnavailable)
		late := d[0].StageTimestamp.Sub(deadline).Seconds()
		if len(res.DeadlineToDelete) == 0 || late > slices.Max(res.DeadlineToDelete) {
			res.Latest = fmt.Sprintf("%s on %s (NotReady at %s, deleted at %s)", key, node,
				since[node].Format("15:04:05.000"), d[0].StageTimestamp.Format("15:04:05.000"))
		}
		res.DeadlineToDelete = append(res.DeadlineToDelete, late)
	}
	res.P50, res.P99 = Percentile(res.DeadlineToDelete, 50), Percentile(res.DeadlineToDelete, 99)

	own, err := ownDeadlines(ctl.Log)
	if err != nil {
		return res, err
	}
	for key := range stranded {
		d := deletes[key]
		if len(d) == 0 {
			continue
		}
		deadline, ok := own[key]
		if !ok {
			return res, fmt.Errorf("scale: rebound deleted %s but its log %s has no deadline for it", key, ctl.Log)
		}
		late := d[0].StageTimestamp.Sub(deadline).Seconds()
		if len(res.OwnDeadlineToDelete) == 0 || late > slices.Max(res.OwnDeadlineToDelete) {
			res.OwnLatest = fmt.Sprintf("%s (rebound's deadline %s, deleted at %s)", key,
				deadline.Format("15:04:05.000"), d[0].StageTimestamp.Format("15:04:05.000"))
		}
		res.OwnDeadlineToDelete = append(res.OwnDeadlineToDelete, late)
	}
	res.OwnP50, res.OwnP99 = Percentile(res.OwnDeadlineToDelete, 50), Percentile(res.OwnDeadlineToDelete, 99)
	return res, nil
}

func installPolicies(ctx context.Context, c *sandbox.Cluster, cl client.Client, o Options) error {
	for i := range o.Policies {
		ns := rescueNamespace(i)
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		policy := fmt.Sprintf(`apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: %s
spec:
  critical:
    namespaces: [%s]
  maxUnavailableTime: %s
  limits:
    maxConcurrent: 100
    maxActionsPerMinute: 1000
`, ns, ns, o.MaxUnavailable)
		if _, err := install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-scale"}, []byte(policy)); err != nil {
			return err
		}
	}
	return nil
}

func labelVictims(ctx context.Context, c *sandbox.Cluster, victims []string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, VictimLabel)
	return sandbox.Parallel(ctx, len(victims), 16, func(ctx context.Context, i int) error {
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, victims[i], types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// createRescued creates n single-replica Deployments that prefer the
// victim nodes, alternating between the rescue namespaces, and waits until
// each is available.
func createRescued(ctx context.Context, c *sandbox.Cluster, n, namespaces int) error {
	err := sandbox.Parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		ns, name := rescueNamespace(i%namespaces), fmt.Sprintf("rescued-%d", i)
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
						TerminationGracePeriodSeconds: ptr.To[int64](30),
						// A preference: the replacement must be able to go
						// anywhere once the victims are dead.
						Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
							PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
								Weight: 100,
								Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
									Key: VictimLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
								}}},
							}},
						}},
					},
				},
			},
		}
		_, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("scale: create the rescued Deployments: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, false, func(ctx context.Context) (bool, error) {
		avail := 0
		for i := range namespaces {
			list, err := c.Client.AppsV1().Deployments(rescueNamespace(i)).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // poll through hiccups
			}
			for i := range list.Items {
				avail += int(list.Items[i].Status.AvailableReplicas)
			}
		}
		return avail >= n, nil
	})
}

// strandedPods are the rescued pods on the victims, keyed namespace/name,
// with their node.
func strandedPods(ctx context.Context, c *sandbox.Cluster, victims []string, namespaces int) (map[string]string, error) {
	victim := map[string]bool{}
	for _, v := range victims {
		victim[v] = true
	}
	out := map[string]string{}
	for i := range namespaces {
		list, err := c.Client.CoreV1().Pods(rescueNamespace(i)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if victim[p.Spec.NodeName] && p.DeletionTimestamp == nil {
				out[p.Namespace+"/"+p.Name] = p.Spec.NodeName
			}
		}
	}
	return out, nil
}

// podDeletes are rebound's successful pod deletions, by namespace/name,
// oldest first, from the audit log.
func podDeletes(c *sandbox.Cluster) (map[string][]sandbox.AuditEvent, error) {
	evs, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		return e.Verb == "delete" && e.ObjectRef.Resource == "pods" && e.User.Username == sandbox.ReboundUser && e.ResponseStatus.Code < 300
	})
	out := map[string][]sandbox.AuditEvent{}
	for _, e := range evs {
		k := e.ObjectRef.Namespace + "/" + e.ObjectRef.Name
		out[k] = append(out[k], e)
	}
	return out, err
}

// notReadySince reads each victim's Ready lastTransitionTime, the time the
// planner counts maxUnavailableTime from.
func notReadySince(ctx context.Context, c *sandbox.Cluster, nodes []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	for i := range list.Items {
		n := &list.Items[i]
		if !want[n.Name] {
			continue
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				out[n.Name] = cond.LastTransitionTime.Time
			}
		}
	}
	return out, nil
}

func componentPIDs(c *sandbox.Cluster) map[string]int {
	out := map[string]int{}
	for _, name := range []string{sandbox.Etcd, sandbox.APIServer, sandbox.ControllerManager, sandbox.Scheduler, sandbox.Kwok} {
		if pid, err := c.ComponentPID(name); err == nil {
			out[name] = pid
		}
	}
	return out
}

func sampleAll(pids map[string]int) map[string]ProcSample {
	out := map[string]ProcSample{}
	for name, pid := range pids {
		if s, err := SampleProc(pid); err == nil {
			out[name] = s
		}
	}
	return out
}

func usage(before, after map[string]ProcSample) map[string]ComponentUsage {
	out := map[string]ComponentUsage{}
	for name, a := range before {
		if b, ok := after[name]; ok {
			out[name] = ComponentUsage{RSSMiB: b.RSSMiB, CPUPerMin: CPUPerMinute(a, b)}
		}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
