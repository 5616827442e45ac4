package rescue

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
)

// ActionKind is one API change the controller makes.
type ActionKind string

const (
	// ActionDelete deletes the pod gracefully (the pod's own grace period)
	// with a UID precondition, so that its ReplicaSet replaces it. A second
	// plan sees the deletionTimestamp and does not delete again.
	ActionDelete ActionKind = "Delete"
	// ActionForceDelete deletes the pod with grace period 0 and a UID
	// precondition: the API object goes at once, so its StatefulSet (or
	// ReplicaSet) recreates it elsewhere. Only on a fenced node.
	ActionForceDelete ActionKind = "ForceDelete"
	// ActionScaleDown is the first half of a scale bounce: in ONE update of
	// the Deployment (with the plan's resourceVersion as precondition), set
	// the annotation ScaleBounceAnnotation to Replicas and spec.replicas to
	// 0. Doing both at once is what makes the bounce crash-safe: the
	// annotation is the memory of the replica count.
	ActionScaleDown ActionKind = "ScaleDown"
	// ActionScaleRestore is the second half: set spec.replicas to Replicas
	// and remove the annotation, in one update. It is planned whenever a
	// Deployment has the annotation and 0 replicas, so a controller that
	// crashed between the halves finishes the bounce after its restart.
	ActionScaleRestore ActionKind = "ScaleRestore"
)

// EventReason is the reason of the Kubernetes Event that records the
// action, the same for the controller and `rebound restore bringup`.
func (k ActionKind) EventReason() string {
	switch k {
	case ActionDelete:
		return "StrandedPodDeleted"
	case ActionForceDelete:
		return "StrandedPodForceDeleted"
	case ActionScaleDown:
		return "ScaleBounceDown"
	case ActionScaleRestore:
		return "ScaleBounceRestored"
	}
	return "Rescue"
}

// ScaleBounceAnnotation holds, on a Deployment scaled down by rebound, the
// replica count to restore.
const ScaleBounceAnnotation = "rebound.dev/scale-bounce-replicas"

// ScaleBouncedForAnnotation records, on a Deployment rebound scale-bounced,
// the start of the incident the bounce was for: the stranded pod's node's
// NotReady transition (Ready condition lastTransitionTime, RFC 3339). It is
// written in the same update as the scale-down and kept after the restore,
// so that the Deployment itself remembers "bounced once for this
// incident", however many records status.lastActions has dropped since and
// however often the controller restarted. A later incident (a node NotReady
// after that time) may bounce again.
const ScaleBouncedForAnnotation = "rebound.dev/scale-bounced-for"

// BouncedFor reads ScaleBouncedForAnnotation. ok is false without the
// annotation; err is set when it is there but not a time, which callers
// must treat as "already bounced" (fail closed).
func BouncedFor(annotations map[string]string) (t time.Time, ok bool, err error) {
	v, ok := annotations[ScaleBouncedForAnnotation]
	if !ok {
		return time.Time{}, false, nil
	}
	t, err = time.Parse(time.RFC3339, v)
	return t, true, err
}

// BounceCovers reports whether a Deployment's annotations already record a
// bounce for an incident that started at since (or later), and says so.
// The planner and the executor (on the Deployment it re-reads from the API)
// both apply it. slack is the node grace: a node rebound marked early goes
// NotReady at most one grace after its last renewal, which came before
// the mark, so a bounce recorded at the mark covers a NotReady transition
// up to a grace later, even when a restarted controller took the mark off
// in between (it holds early judgement; the incident's record stays).
func BounceCovers(annotations map[string]string, since time.Time, slack time.Duration) (string, bool) {
	t, ok, err := BouncedFor(annotations)
	switch {
	case !ok:
		return "", false
	case err != nil:
		return fmt.Sprintf("annotation %s=%q is not an RFC 3339 time, so rebound assumes a bounce was done; remove it to allow another scale bounce",
			ScaleBouncedForAnnotation, annotations[ScaleBouncedForAnnotation]), true
	case !since.After(t.Add(slack)):
		return fmt.Sprintf("already scale-bounced once for this incident (annotation %s=%s, node NotReady since %s): not repeated; look at why the replacement is not available",
			ScaleBouncedForAnnotation, formatTime(t), formatTime(since)), true
	}
	return "", false
}

// Action is one change to apply. Namespace/Name/Kind identify it: applying
// the same plan twice finds the change already made (preconditions fail or
// the next plan no longer lists it).
type Action struct {
	Kind ActionKind
	// Policy is the RecoveryPolicy the action is taken under ("" for a
	// ScaleRestore no valid policy selects: it is finished regardless).
	Policy string
	// Namespace and Name are the object changed: the pod for deletes, the
	// Deployment for scale actions.
	Namespace, Name string
	// UID is the object's UID, a precondition: never act on a newer
	// object of the same name.
	UID types.UID
	// ResourceVersion is the version of the object the plan read. For a
	// delete it is a precondition: a pod that changed since (most often
	// one this controller deleted a moment ago, still shown live by a
	// cache whose watch broke) is re-planned, never deleted twice. For a
	// scale action, an Update with it lets a concurrent change win.
	ResourceVersion string
	// Pod is the stranded pod the action is for (same namespace); empty
	// for ScaleRestore. Node is its node.
	Pod, Node string
	// Replicas is the count to save (ScaleDown) or restore (ScaleRestore).
	Replicas int32
	// Incident is, for ScaleDown, when the stranded pod's node went
	// NotReady (or was marked unreachable, if earlier): the value of
	// ScaleBouncedForAnnotation.
	Incident time.Time
	// IncidentSlack is the node grace BounceCovers allows between a
	// recorded bounce and Incident.
	IncidentSlack time.Duration
	// Deadline is, for an action on a stranded pod, when the policy's
	// maxUnavailableTime ran out on this process's clock
	// (CriticalPod.Deadline): logged with the action, so that how late
	// rebound acts after its own deadline can be measured from outside.
	// Zero for ScaleRestore.
	Deadline time.Time
	// TwoPlane is set on a delete a two-plane verdict decided (policy
	// detection TwoPlanes): the executor then requires what it says of
	// the node's Lease, taint and verdict, where it would otherwise
	// refuse every delete off a Ready node.
	TwoPlane *TwoPlaneCheck
	// LeaseRenewTime is, on any other delete, the node's Lease
	// spec.renewTime the plan read (Snapshot.LeaseRenewTimes): the
	// executor re-reads the Lease and refuses the delete if it names
	// another time, since a renewal after the plan means the kubelet
	// reaches the API again, whatever the Ready flag says yet. Only
	// compared, never used as a time (the kubelet's clock wrote it). Zero:
	// the caller read the Leases and found none for the node (one found
	// now refuses the delete). nil: the caller read no Leases.
	LeaseRenewTime *time.Time
	// KeepsOff is, on a delete or scale bounce, the taint of the pod's
	// node that keeps the replacement from landing back there (for a
	// cordon, node.kubernetes.io/unschedulable:NoSchedule); before a
	// delete the executor re-reads the node and refuses if it no longer
	// carries it (KeepsOff). nil: nothing could (the pod tolerates every
	// taint), and the planner allowed one delete for the incident.
	KeepsOff *corev1.Taint
	// DryRun: the policy is in dry run; log the action, change nothing.
	DryRun bool
	// Reason names the rule, fit for an Event and a log line.
	Reason string
}

// Key identifies the action: "Kind namespace/name".
func (a *Action) Key() string { return string(a.Kind) + " " + a.Namespace + "/" + a.Name }

// PodRef is "namespace/pod", the form to store in
// status.lastActions[].pod: the planner reads it back to avoid a second
// scale bounce for the same pod.
func (a *Action) PodRef() string {
	if a.Pod == "" {
		return ""
	}
	return a.Namespace + "/" + a.Pod
}

// planRestores plans the second half of every scale bounce found in the
// snapshot. Restores are never rate-limited, suspended or dry-run: they put
// back what rebound itself took away, and a Deployment left at 0 replicas is
// the worst outcome of all.
func (p *planner) planRestores() {
	for _, d := range p.snap.Deployments {
		if d == nil {
			continue
		}
		v, ok := d.Annotations[ScaleBounceAnnotation]
		if !ok {
			continue
		}
		name := d.Namespace + "/" + d.Name
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			p.warnings = append(p.warnings, fmt.Sprintf(
				"Deployment %s: annotation %s=%q is not a replica count; set spec.replicas by hand and remove the annotation",
				name, ScaleBounceAnnotation, v))
			continue
		}
		if r := desiredReplicas(d.Spec.Replicas); r != 0 {
			// Someone scaled it since the scale-down. Their count wins; the
			// stale annotation only blocks further bounces.
			p.warnings = append(p.warnings, fmt.Sprintf(
				"Deployment %s carries %s=%s but has %d replicas (changed since rebound scaled it down): remove the annotation to allow another scale bounce",
				name, ScaleBounceAnnotation, v, r))
			continue
		}
		// Name the policy that selects the Deployment's pods, for Events
		// and status; the pod template stands in for pods that may all be
		// gone by now.
		policy := ""
		templatePod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
			Spec:       corev1.PodSpec{PriorityClassName: d.Spec.Template.Spec.PriorityClassName},
		}
		for _, r := range p.rules {
			if r.selects(templatePod, p.snap.Namespaces) {
				policy = r.name
				break
			}
		}
		p.actions = append(p.actions, Action{
			Kind:            ActionScaleRestore,
			Policy:          policy,
			Namespace:       d.Namespace,
			Name:            d.Name,
			UID:             d.UID,
			ResourceVersion: d.ResourceVersion,
			Replicas:        int32(n),
			Reason: fmt.Sprintf("scale bounce, second half: Deployment %s has 0 replicas and %s=%d: restore %d replicas and remove the annotation",
				d.Name, ScaleBounceAnnotation, n, n),
		})
	}
}

// candidate is an action a stranded pod calls for, before the limits.
type candidate struct {
	// pod indexes planner.critical.
	pod  int
	rule *policyRule
	act  Action
	// startsRescue: the action begins a new rescue and so needs a
	// maxConcurrent slot. A scale bounce of an already deleted pod
	// continues one.
	startsRescue bool
	// obj is the stranded pod, whose replacement needs a target.
	obj *corev1.Pod
}

// decideStranded decides about the stranded pod planner.critical[i]
// according to its workload's safety rule.
func (p *planner) decideStranded(i int, pod *corev1.Pod, node *nodeState, rule *policyRule, o owners) {
	cp := &p.critical[i]
	switch cp.Workload.Class {
	case ClassStateless:
		p.decideStateless(i, pod, rule, o)
	case ClassStateful:
		p.decideStateful(i, pod, node, rule)
	case ClassJob:
		p.report(cp, DecisionReportOnly, "owned by Job %s: the Job controller replaces lost pods itself; report only", cp.Workload.Name)
	case ClassNoController:
		p.report(cp, DecisionReportOnly, "no controller owner: nothing would recreate the pod if rebound deleted it; report only")
	case ClassUnsupported:
		p.report(cp, DecisionReportOnly, "owned by %s %s: rebound rescues only ReplicaSet/Deployment and StatefulSet pods; report only",
			cp.Workload.Kind, cp.Workload.Name)
	case ClassOwnerNotFound:
		p.report(cp, DecisionReportOnly, "%s: rebound cannot verify a replacement, so it starts none; report only", cp.Workload.Why)
	}
}

// report sets a decision without action.
func (p *planner) report(cp *CriticalPod, d Decision, format string, args ...any) {
	cp.Decision = d
	cp.Reason = fmt.Sprintf(format, args...)
}

// decideStateless applies the rule for ReplicaSet/Deployment pods: delete,
// wait for the replacement, scale-bounce if it does not come.
func (p *planner) decideStateless(i int, pod *corev1.Pod, rule *policyRule, o owners) {
	cp := &p.critical[i]
	d := o.deployment
	var staleBounce string
	if d != nil {
		if v, ok := d.Annotations[ScaleBounceAnnotation]; ok {
			if desiredReplicas(d.Spec.Replicas) == 0 {
				// planRestores handles the Deployment; deleting pods now
				// would only race the bounce.
				p.report(cp, DecisionInFlight, "scale bounce of Deployment %s under way (annotation %s=%s); no other action until it is restored",
					d.Name, ScaleBounceAnnotation, v)
				return
			}
			// Someone rescaled the Deployment after rebound's scale-down:
			// never scale it down again while the annotation is there.
			staleBounce = fmt.Sprintf("Deployment %s carries %s=%s from an earlier scale bounce but has %d replicas; remove the annotation to allow another scale bounce",
				d.Name, ScaleBounceAnnotation, v, desiredReplicas(d.Spec.Replicas))
		}
	}

	if !cp.Terminating {
		switch {
		case rule.allowDelete:
			p.propose(i, pod, rule, true, Action{Kind: ActionDelete, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
				"stranded %s pod: delete it so that ReplicaSet %s creates a replacement on a Ready node",
				cp.Workload, o.replicaSet.Name)
		case rule.allowBounce && d != nil && staleBounce != "":
			p.report(cp, DecisionReportOnly, "stranded %s pod and DeleteAndReplace is not among the policy's actions; %s", cp.Workload, staleBounce)
		case rule.allowBounce && d != nil:
			if why, no := bounceRefused(cp, d, p.grace); no {
				p.report(cp, DecisionReportOnly, "stranded %s pod and DeleteAndReplace is not among the policy's actions; %s", cp.Workload, why)
				return
			}
			p.proposeScaleDown(i, pod, rule, true, o,
				"stranded %s pod and DeleteAndReplace is not among the policy's actions: scale bounce", cp.Workload)
		default:
			// Only reachable with actions [ScaleBounce] and a ReplicaSet
			// that no Deployment owns.
			p.report(cp, DecisionReportOnly, "stranded %s pod: DeleteAndReplace is not among the policy's actions and ScaleBounce needs a Deployment; report only",
				cp.Workload)
		}
		return
	}

	// Already deleted, by rebound or anyone: never delete again, check the
	// replacement through the owner's status, not through pod presence.
	requested := deletionRequestedAt(pod)
	ok, avail := o.available()
	if ok {
		if by := p.upstreamDeleter(pod, p.nodeOf(pod)); by != "" {
			// Not rebound's doing: say who, so that nobody credits rebound.
			p.report(cp, DecisionReplaced, "evicted by %s at %s and %s: replaced by upstream, nothing for rebound to do (the old pod stays Terminating until its node returns or is removed)",
				by, formatTime(requested), avail)
			return
		}
		p.report(cp, DecisionReplaced, "deleted at %s and %s: rescue complete (the old pod stays Terminating until its node returns or is removed)",
			formatTime(requested), avail)
		return
	}
	// Its replacement takes room on a Ready node, whether the snapshot
	// shows it yet or not (target.go).
	p.addInFlight(pod)
	waiting := fmt.Sprintf("deleted at %s, waiting for the replacement: %s", formatTime(requested), avail)
	bounceAt := requested.Add(p.defaults.ReplacementTimeout)
	switch {
	case d == nil:
		p.report(cp, DecisionInFlight, "%s; no Deployment to scale bounce", waiting)
	case !rule.allowBounce:
		p.report(cp, DecisionInFlight, "%s; ScaleBounce is not among the policy's actions", waiting)
	case p.now.Before(bounceAt):
		p.report(cp, DecisionInFlight, "%s; scale bounce at %s (replacement timeout %s) if still short",
			waiting, formatTime(bounceAt), p.defaults.ReplacementTimeout)
		p.wake(bounceAt)
	case staleBounce != "":
		p.report(cp, DecisionReportOnly, "%s; %s", waiting, staleBounce)
	default:
		if why, no := bounceRefused(cp, d, p.grace); no {
			// A bounce that did not bring the replacement will not do
			// better the second time; stop rather than churn.
			p.report(cp, DecisionReportOnly, "%s; %s", waiting, why)
			return
		}
		p.proposeScaleDown(i, pod, rule, false, o, "%s for longer than the replacement timeout %s: scale bounce", waiting, p.defaults.ReplacementTimeout)
	}
}

// bounceRefused applies the two rules that keep a scale bounce from doing
// harm: at most one per incident (read from the Deployment's own
// annotation), and only when no replica is available (a bounce restarts
// every replica, so with one available it would take a working service
// down).
func bounceRefused(cp *CriticalPod, d *appsv1.Deployment, slack time.Duration) (string, bool) {
	if why, covered := BounceCovers(d.Annotations, cp.Incident, slack); covered {
		return why, true
	}
	if n := d.Status.AvailableReplicas; n > 0 {
		return fmt.Sprintf("Deployment %s has %d replica(s) available: no scale bounce, which would restart them; rebound bounces only a Deployment with none available",
			d.Name, n), true
	}
	return "", false
}

// proposeScaleDown proposes the first half of a scale bounce of the pod's
// Deployment.
func (p *planner) proposeScaleDown(i int, pod *corev1.Pod, rule *policyRule, starts bool, o owners, format string, args ...any) {
	d := o.deployment
	want := desiredReplicas(d.Spec.Replicas)
	since := p.critical[i].Incident
	p.propose(i, pod, rule, starts, Action{
		Kind:            ActionScaleDown,
		Name:            d.Name,
		UID:             d.UID,
		ResourceVersion: d.ResourceVersion,
		Replicas:        want,
		Incident:        since,
		IncidentSlack:   p.grace,
	}, "%s Deployment %s: %d replicas to 0 now (annotation %s=%d, %s=%s), back to %d on the next plan; at most once for this incident",
		fmt.Sprintf(format, args...), d.Name, want, ScaleBounceAnnotation, want, ScaleBouncedForAnnotation, formatTime(since), want)
}

// decideStateful applies the rule for pods with identity or exclusive
// storage: two copies must never run, so the pod moves only off a node
// someone confirmed off (fenced).
func (p *planner) decideStateful(i int, pod *corev1.Pod, node *nodeState, rule *policyRule) {
	cp := &p.critical[i]
	what := "StatefulSet pod"
	if cp.Workload.Kind != "StatefulSet" {
		what = fmt.Sprintf("%s pod with exclusive storage (%s)", cp.Workload, cp.Workload.Why)
	}
	alive := ""
	if node.alive != "" {
		alive = fmt.Sprintf("; node %s appears alive but cut off from the API (%s)", node.node.Name, node.alive)
	}
	switch {
	case rule.fencing == v1alpha1.Never:
		p.report(cp, DecisionReportOnly, "%s: the policy's fencing mode is Never; rebound reports only%s", what, alive)
	case !node.fenced && rule.fencing == v1alpha1.Watchdog:
		p.report(cp, DecisionWaitingForFencing, "%s: waiting for fencing; rebound puts the %s:NoExecute taint on once it has proven that the node's watchdog reset it (docs/fencing.md), or a person puts it on%s",
			what, corev1.TaintNodeOutOfService, alive)
	case !node.fenced:
		p.report(cp, DecisionWaitingForFencing, "%s: waiting for fencing; add the %s:NoExecute taint once the node is confirmed off%s",
			what, corev1.TaintNodeOutOfService, alive)
	case forceDeleteIssued(pod):
		p.report(cp, DecisionInFlight, "%s: force delete already issued (grace period 0); the pod's finalizers hold it", what)
	case alive != "":
		p.report(cp, DecisionHeld, "%s on node %s, fenced (%s:NoExecute) yet it appears alive (%s): the two signals disagree and a live node may still run the pod, so no force delete (two copies are worse than a stall); confirm the node is off and that its BGP sessions are down",
			what, node.node.Name, corev1.TaintNodeOutOfService, node.alive)
	default:
		p.propose(i, pod, rule, true, Action{Kind: ActionForceDelete, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
			"%s on fenced node %s (taint %s): force delete (grace period 0) so that %s recreates it on a Ready node",
			what, node.node.Name, corev1.TaintNodeOutOfService, cp.Workload)
	}
}

// propose turns an action into a candidate for the limits. The reason
// gets the stranding summary so that an Event on its own tells the whole
// story. Whether a Ready node admits the replacement, and whether the
// policy is suspended, is decided with the limits (applyLimits), in
// priority order, because each admitted action reserves room on its
// target node for the pods after it.
func (p *planner) propose(i int, pod *corev1.Pod, rule *policyRule, starts bool, a Action, format string, args ...any) {
	cp := &p.critical[i]
	reason := fmt.Sprintf(format, args...) + "; " + strandedSummary(cp, rule.maxUnavailable, p.now)
	a.Policy, a.Namespace, a.Pod, a.Node, a.Reason = rule.name, cp.Namespace, cp.Name, cp.Node, reason
	a.Deadline = cp.Deadline
	if n := p.idx.notReady[cp.Node]; n != nil && (a.Kind == ActionDelete || a.Kind == ActionForceDelete) {
		// The deletes' re-check; a scale bounce needs no node, and comes
		// only for a Deployment with no replica available.
		a.TwoPlane = n.twoPlaneFor(rule)
		if p.snap.LeaseRenewTimes != nil && a.TwoPlane == nil {
			// The caller read the Leases: the one it read for the node, or
			// none (zero), is what the executor compares.
			renew := p.snap.LeaseRenewTimes[cp.Node]
			a.LeaseRenewTime = &renew
		}
	}
	cp.Reason = reason
	p.candidates = append(p.candidates, candidate{pod: i, rule: rule, act: a, startsRescue: starts, obj: pod})
}

// deletionRequestedAt is when the pod's deletion was asked for: the
// deletionTimestamp is that moment plus the grace period.
func deletionRequestedAt(pod *corev1.Pod) time.Time {
	t := pod.DeletionTimestamp.Time
	if g := pod.DeletionGracePeriodSeconds; g != nil && *g > 0 {
		t = t.Add(-time.Duration(*g) * time.Second)
	}
	return t
}

// forceDeleteIssued: the pod was deleted with grace period 0 but still
// exists, which only finalizers cause.
func forceDeleteIssued(pod *corev1.Pod) bool {
	g := pod.DeletionGracePeriodSeconds
	return pod.DeletionTimestamp != nil && g != nil && *g == 0
}

// upstreamDeleter names the upstream controller that deleted pod, from
// what says who deleted (DeletedBy: rebound's own records, the node's
// NoExecute taint with the pod's toleration; the DisruptionTarget
// condition alone is also set on a pod rebound deleted); "" when none did
// (rebound, or anyone else).
func (p *planner) upstreamDeleter(pod *corev1.Pod, node *corev1.Node) string {
	if p.deleteRecords == nil {
		p.deleteRecords = DeleteRecords(p.snap.Policies)
	}
	switch DeletedBy(pod, node, p.deleteRecords).By {
	case DeletedByTaintEviction:
		return "kube-controller-manager's taint eviction"
	case DeletedByPodGC:
		return "kube-controller-manager's pod garbage collector"
	}
	return ""
}

// nodeOf is the Node object pod is bound to, nil when the snapshot has
// none.
func (p *planner) nodeOf(pod *corev1.Pod) *corev1.Node {
	if ns := p.idx.notReady[pod.Spec.NodeName]; ns != nil {
		return ns.node
	}
	return nil
}
