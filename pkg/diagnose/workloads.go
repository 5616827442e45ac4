package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/kubestatus"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// cause is one reason a workload is short of available pods.
type cause struct {
	impact  Impact
	text    string
	rebound string
	since   time.Time
}

// workloadSpec is what explainWorkloads needs of any workload kind.
type workloadSpec struct {
	kind, namespace, name string
	desired, available    int32
	pods                  []*corev1.Pod
	// podsStayWithNode: DaemonSet pods belong to their node.
	podsStayWithNode bool
	// waitsForOldPod: a StatefulSet creates no replacement while the old
	// pod object exists, even Terminating.
	waitsForOldPod bool
}

func (e *explainer) explainWorkloads() {
	var specs []workloadSpec
	for _, d := range e.s.Deployments {
		if d == nil {
			continue
		}
		desired := kubestatus.Replicas(d.Spec.Replicas)
		if v, ok := d.Annotations[rescue.ScaleBounceAnnotation]; ok && desired == 0 {
			e.addWorkload(Workload{
				Kind: "Deployment", Namespace: d.Namespace, Name: d.Name, Desired: 0, Available: d.Status.AvailableReplicas,
				Impact:  ImpactPending,
				Reason:  fmt.Sprintf("0/0 available: scaled to 0 by rebound's scale bounce, %s replicas to restore (annotation %s)", v, rescue.ScaleBounceAnnotation),
				Rebound: "ScaleRestore on the next pass of `rebound controller`",
			}, time.Time{})
			continue
		}
		if d.Status.AvailableReplicas >= desired && !conditionFalse(d.Status.Conditions, appsv1.DeploymentAvailable) {
			continue
		}
		var pods []*corev1.Pod
		for _, rs := range e.s.ReplicaSets {
			if rs != nil && e.rsDeployment[rs.UID] == d.UID {
				pods = append(pods, e.podsByOwner[rs.UID]...)
			}
		}
		specs = append(specs, workloadSpec{kind: "Deployment", namespace: d.Namespace, name: d.Name,
			desired: desired, available: d.Status.AvailableReplicas, pods: pods})
	}
	for _, s := range e.x.StatefulSets {
		if s == nil {
			continue
		}
		desired := kubestatus.Replicas(s.Spec.Replicas)
		if s.Status.AvailableReplicas >= desired {
			continue
		}
		specs = append(specs, workloadSpec{kind: "StatefulSet", namespace: s.Namespace, name: s.Name,
			desired: desired, available: s.Status.AvailableReplicas, pods: e.podsByOwner[s.UID], waitsForOldPod: true})
	}
	for _, ds := range e.x.DaemonSets {
		if ds == nil || ds.Status.NumberAvailable >= ds.Status.DesiredNumberScheduled {
			continue
		}
		specs = append(specs, workloadSpec{kind: "DaemonSet", namespace: ds.Namespace, name: ds.Name,
			desired: ds.Status.DesiredNumberScheduled, available: ds.Status.NumberAvailable, pods: e.podsByOwner[ds.UID], podsStayWithNode: true})
	}
	for _, w := range specs {
		e.judge(w)
	}
	slices.SortFunc(e.report.Workloads, func(a, b Workload) int {
		return cmp.Or(cmp.Compare(a.Impact.rank(), b.Impact.rank()), strings.Compare(a.Kind, b.Kind),
			strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
}

func conditionFalse(conds []appsv1.DeploymentCondition, typ appsv1.DeploymentConditionType) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}

func (e *explainer) addWorkload(w Workload, since time.Time) {
	e.report.Workloads = append(e.report.Workloads, w)
	f := Finding{
		Impact:  w.Impact,
		Kind:    "Workload",
		Object:  fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name),
		Cause:   w.Reason,
		Rebound: w.Rebound,
	}
	if !since.IsZero() {
		s := since.UTC()
		f.Since = &s
	}
	e.add(f)
}

// judge finds the first blocking reason of a workload that is not
// Available: the most severe of its causes, the first of equals in the
// order they are looked for (pods on NotReady nodes, pods stuck
// terminating, unschedulable pods, pods failing on Ready nodes, pods
// missing).
func (e *explainer) judge(w workloadSpec) {
	slices.SortFunc(w.pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var onNotReady, terminatingOnNotReady, unscheduled, failing []*corev1.Pod
	live := 0
	for _, p := range w.pods {
		n, known := e.nodes[p.Spec.NodeName]
		down := p.Spec.NodeName != "" && (!known || !n.ready || e.earlyDead(p.Spec.NodeName))
		switch {
		case p.DeletionTimestamp != nil && down:
			terminatingOnNotReady = append(terminatingOnNotReady, p)
		case p.DeletionTimestamp != nil:
			// Terminating on a live node: its kubelet finishes it.
		case down:
			live++
			onNotReady = append(onNotReady, p)
		case p.Spec.NodeName == "":
			live++
			unscheduled = append(unscheduled, p)
		case !kubestatus.PodReady(p):
			live++
			failing = append(failing, p)
		default:
			live++
		}
	}

	out := Workload{Kind: w.kind, Namespace: w.namespace, Name: w.name, Desired: w.desired, Available: w.available}
	for _, p := range append(slices.Clone(onNotReady), terminatingOnNotReady...) {
		out.PodsOnNotReadyNodes = append(out.PodsOnNotReadyNodes, p.Name+"@"+p.Spec.NodeName)
	}

	var causes []cause
	if len(onNotReady) > 0 {
		causes = append(causes, e.notReadyCause(w, onNotReady))
	}
	for _, p := range terminatingOnNotReady {
		causes = append(causes, e.terminatingCause(w, p))
	}
	for _, p := range unscheduled {
		causes = append(causes, unscheduledCause(p))
	}
	for _, p := range failing {
		causes = append(causes, failingCause(p))
	}
	if int32(live) < w.desired && len(causes) == 0 {
		causes = append(causes, cause{impact: ImpactPending, text: fmt.Sprintf(
			"only %d of %d pods exist: the %s controller has not created the rest (look at its Events: quota, admission, a failed create)",
			live, w.desired, w.kind)})
	}
	if len(causes) == 0 {
		causes = append(causes, cause{impact: ImpactPending, text: fmt.Sprintf(
			"%d pods run and are Ready, but the status counts %d available: minReadySeconds not reached yet, or the status lags", live, w.available)})
	}
	best := causes[0]
	for _, c := range causes[1:] {
		if c.impact.rank() < best.impact.rank() {
			best = c
		}
	}
	out.Impact = best.impact
	out.Reason = fmt.Sprintf("%d/%d available: %s", w.available, w.desired, best.text)
	out.Rebound = best.rebound
	e.addWorkload(out, best.since)
}

// notReadyCause explains a workload's pods bound to NotReady nodes (or
// to nodes the API has Ready that are dead on both planes). For
// critical pods it takes rebound's decision; for the others the
// planner's upstream answer under everyPodPolicy.
func (e *explainer) notReadyCause(w workloadSpec, pods []*corev1.Pod) cause {
	type judged struct {
		pod      *corev1.Pod
		impact   Impact
		upstream string
		rebound  string
		zone     string
		since    time.Time
	}
	var all []judged
	for _, p := range pods {
		k := podKey{p.Namespace, p.Name}
		n, known := e.nodes[p.Spec.NodeName]
		early := e.earlyDead(p.Spec.NodeName)
		j := judged{pod: p, since: n.since}
		if at := e.s.Verdicts[p.Spec.NodeName].DetectedAt; early && !at.IsZero() {
			j.since = at
		}
		if known {
			z := e.zoneOf(n.zone)
			j.zone = fmt.Sprintf("zone %s %s", zone.DisplayZone(n.zone), z.State)
		}
		switch {
		case !known:
			j.impact, j.upstream = ImpactPending, "by the pod garbage collector (the node no longer exists)"
		case w.podsStayWithNode:
			j.impact = ImpactInfo
		default:
			if i, ok := e.critical[k]; ok && e.report.CriticalPods[i].Decision != string(rescue.DecisionSkip) {
				cp := &e.report.CriticalPods[i]
				e.covered[k] = true
				j.impact, j.upstream, j.rebound = criticalImpact(&e.plan.Critical[i]), cp.Upstream, reboundSays(cp)
				break
			}
			ev := e.every[k]
			switch {
			case ev == nil && early:
				// Only a TwoPlanes policy examines the pods of a node
				// the API has Ready.
				j.impact, j.upstream = ImpactPending, earlyUpstream
				j.rebound = "no TwoPlanes RecoveryPolicy makes it critical: rebound acts on it, if a policy does, once the API has the node NotReady"
				all = append(all, j)
				continue
			case ev == nil:
				j.impact, j.upstream = ImpactPending, "unknown"
			case !ev.UpstreamEviction.IsZero():
				j.impact, j.upstream = ImpactPending, e.upstreamShort(ev)
			default:
				j.impact, j.upstream = ImpactBlocking, e.upstreamShort(ev)
			}
			j.rebound = "no RecoveryPolicy makes it critical, so rebound leaves it alone"
		}
		all = append(all, j)
	}
	worst := all[0]
	earliest := all[0].since
	for _, j := range all[1:] {
		if j.impact.rank() < worst.impact.rank() {
			worst = j
		}
		if j.since.Before(earliest) {
			earliest = j.since
		}
	}
	where := e.downNode(worst.pod.Spec.NodeName)
	if worst.zone != "" {
		where += " (" + worst.zone + ")"
	}
	if _, known := e.nodes[worst.pod.Spec.NodeName]; !known {
		where = "NotReady node " + worst.pod.Spec.NodeName + ", which no longer exists"
	}
	nodes := "NotReady nodes"
	for _, p := range pods {
		if e.earlyDead(p.Spec.NodeName) {
			nodes = "nodes NotReady or dead on both planes"
		}
	}
	var text string
	switch {
	case w.podsStayWithNode:
		text = fmt.Sprintf("%d of its pods are on %s (%s): DaemonSet pods stay with their node and return with it", len(pods), nodes, nodesOf(pods))
	case len(pods) == 1 && len(w.pods) == 1:
		text = fmt.Sprintf("its only pod %s is on %s; upstream eviction %s", worst.pod.Name, where, worst.upstream)
	case len(pods) == 1:
		text = fmt.Sprintf("pod %s is on %s; upstream eviction %s", worst.pod.Name, where, worst.upstream)
	default:
		text = fmt.Sprintf("%d of its pods are on %s (%s); pod %s on %s: upstream eviction %s",
			len(pods), nodes, nodesOf(pods), worst.pod.Name, where, worst.upstream)
	}
	return cause{impact: worst.impact, text: text, rebound: worst.rebound, since: earliest}
}

// terminatingCause explains a pod deleted on a NotReady node: its kubelet
// never confirms, so the object stays until the node returns or is fenced.
func (e *explainer) terminatingCause(w workloadSpec, p *corev1.Pod) cause {
	k := podKey{p.Namespace, p.Name}
	n := e.nodes[p.Spec.NodeName]
	c := cause{since: p.DeletionTimestamp.Time}
	if w.waitsForOldPod {
		c.impact = ImpactBlocking
		c.text = fmt.Sprintf("pod %s is Terminating on %s since %s and the StatefulSet creates no replacement while it exists: confirm the node is off, then taint it %s",
			p.Name, e.downNode(p.Spec.NodeName), stamp(p.DeletionTimestamp.Time), corev1.TaintNodeOutOfService)
	} else {
		c.impact = ImpactPending
		c.text = fmt.Sprintf("pod %s is Terminating on %s (deleted at %s); its replacement counts once it is Ready",
			p.Name, e.downNode(p.Spec.NodeName), stamp(p.DeletionTimestamp.Time))
	}
	if d := e.deletedBy(k); d != nil {
		c.text += "; " + deletedByText(d)
	}
	if i, ok := e.critical[k]; ok {
		e.covered[k] = true
		cp := &e.report.CriticalPods[i]
		c.rebound = reboundSays(cp)
		if imp := criticalImpact(&e.plan.Critical[i]); !w.waitsForOldPod || imp == ImpactPending {
			c.impact = imp
		}
	}
	if n.node == nil {
		c.text += " (the node no longer exists: the pod garbage collector removes the pod)"
		c.impact = ImpactPending
	}
	return c
}

// downNode names a node a pod is stranded on: "NotReady node X", or, for
// a node the API still has Ready, "node X, Ready in the API but dead on
// both planes".
func (e *explainer) downNode(name string) string {
	if e.earlyDead(name) {
		return "node " + name + ", Ready in the API but dead on both planes"
	}
	return "NotReady node " + name
}

func unscheduledCause(p *corev1.Pod) cause {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return cause{impact: ImpactBlocking, since: c.LastTransitionTime.Time,
				text: fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, oneLine(c.Message))}
		}
	}
	return cause{impact: ImpactPending, since: p.CreationTimestamp.Time, text: fmt.Sprintf("pod %s is waiting to be scheduled", p.Name)}
}

// stuckReasons are container waiting reasons that do not clear by
// themselves.
var stuckReasons = []string{"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

func failingCause(p *corev1.Pod) cause {
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, s := range statuses {
		if s.State.Waiting != nil && slices.Contains(stuckReasons, s.State.Waiting.Reason) {
			msg := s.State.Waiting.Reason
			if m := oneLine(s.State.Waiting.Message); m != "" {
				msg += ": " + m
			}
			return cause{impact: ImpactBlocking, since: p.CreationTimestamp.Time,
				text: fmt.Sprintf("pod %s on node %s: container %s is %s", p.Name, p.Spec.NodeName, s.Name, msg)}
		}
	}
	return cause{impact: ImpactPending, since: p.CreationTimestamp.Time,
		text: fmt.Sprintf("pod %s on node %s is not Ready yet", p.Name, p.Spec.NodeName)}
}

func nodesOf(pods []*corev1.Pod) string {
	var names []string
	for _, p := range pods {
		if !slices.Contains(names, p.Spec.NodeName) {
			names = append(names, p.Spec.NodeName)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// oneLine folds a multi-line message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
