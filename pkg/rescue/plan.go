// Package rescue is the decision core of rebound's recovery controller: from
// a Snapshot of the cluster it finds the critical pods stranded on NotReady
// nodes (those upstream eviction will not move within their policy's
// maxUnavailableTime) and plans what to do about each, with a reason.
//
// It is a pure function: no client, no logger, no clock (the time is
// Snapshot.Now). The controller gathers a snapshot, calls PlanFor, applies
// Plan.Actions and requeues at Plan.NextCheck. Because every action is
// derived from the cluster's state (a terminating pod is a delete already
// done, the scale-bounce annotation is a scale-down already done,
// status.lastActions holds the rate-limit window), a restarted controller
// recomputes the same plan and repeats nothing that took effect.
//
// Decision table (the reason strings name the rule). The rows marked (*)
// gate every action that starts or continues a rescue (Delete, ForceDelete,
// ScaleDown), in this order, before the limits; ScaleRestore is never gated:
// it puts back what rebound itself took away.
//
//	situation                                          decision           action
//	DaemonSet pod, mirror (static) pod                 Skip               none, ever
//	NotReady < maxUnavailableTime, upstream too late   NotYet             none; NextCheck at the deadline
//	upstream evicts by the deadline                    LeftToUpstream     none
//	policy detection TwoPlanes, node dead on both      (as above)         its pods are examined although the API may have it
//	  planes and marked rebound.dev/unreachable                           Ready; the clock counts from the verdict's
//	  (pkg/unreachable), its Lease renewTime known                        DetectedAt; each action carries a TwoPlaneCheck
//	                                                                      the executor re-checks (Lease renewTime, the
//	                                                                      taint, the verdict) in place of "node Ready";
//	                                                                      every other row applies unchanged
//	  ... any other policy, or the node not marked     none               a node the API has Ready is not down for it
//	NotReady, its Lease seen renewing on rebound's     NotYet             none; the clock starts when the Lease goes stale:
//	  clock (Snapshot.Verdicts' Lease plane)                              its kubelet reaches the API, whatever its Ready flag
//	(*) every node NotReady (full disruption), or      Held               none; like kube-controller-manager, which evicts
//	    no node's Lease renewing (a Lease stall)                          nothing then: the control plane is the likelier side
//	                                                                      cut off. Computed from the nodes and Leases, not from
//	                                                                      the zone model's FullDisruptionMode flag. When it
//	                                                                      ends, every NotReady node's maxUnavailableTime clock
//	                                                                      restarts a node grace period later (Plan.Disruption,
//	                                                                      zone.Config.NodeMonitorGracePeriod), as
//	                                                                      kube-controller-manager resets its probe times
//	(*) its node seen alive by a witness that          Held               none: no scale bounce of a pod deleted before the
//	    reaches the API (CutOffFromAPI, see below)                        evidence came, nor any other action
//	(*) the node does not yet bar the replacement:     NotYet             none; the reason says it waits for the taint, so that
//	    no NoSchedule/NoExecute taint the pod does                        the replacement cannot land back on the node (the
//	    not tolerate (scheduler's own matcher), no                        scheduler has no Ready filter; a replacement bound
//	    cordon, but kube-controller-manager's                             there is stranded at once, and a 0 s policy deleted
//	    not-ready/unreachable:NoSchedule would bar it                     it again, four times for one rescue); re-planned on
//	                                                                      the node's change and every 15 s
//	(*) nothing can bar it (the pod tolerates every    Act, once          Delete, reason says "at most once for this incident";
//	    taint), no rescue recorded for this incident                      the action carries no KeepsOff
//	    ... a rescue recorded: the pod itself deleted  Held               none; read from the cluster, so a restarted
//	        since the incident began, a Terminating                       controller holds too
//	        pod of its owner on the node deleted since,
//	        or the pod created since and bound there
//	(*) no Ready, schedulable node admits the pod      NoTarget           none; reason lists each node's rejection (cordoned,
//	    (target.go: taints, nodeSelector/affinity,                        taint, affinity, host port, resources, pod
//	    host ports, requests vs allocatable minus                         (anti-)affinity, NotReady), naming the reservation
//	    requested, pod (anti-)affinity; minus what                        in the way; re-planned when a node changes (the
//	    this pass's replacements, Pending pods and                        controller watches nodes) and every 15 s; a node
//	    unseen replacements reserve)                                      the API has Ready but that is dead on both planes,
//	                                                                      or whose Lease is stale on rebound's clock, is no
//	                                                                      target for any policy
//	NotReady past maxUnavailableTime, but a witness    Held               none; not stranded (Stranded false): a node seen alive
//	  that reaches the API sees it alive (verdict                         lost the API, or its path to it, not its life, whatever
//	  CutOffFromAPI: a fresh gossip Alive read, an                        its Lease and Ready flag say; the reason names the
//	  Established session), ReplicaSet pod                                evidence; NextCheck every 15 s, so that the pod is
//	                                                                      rescued once the evidence ages out (verdict Unknown or
//	                                                                      Dead: the rows below, as without agents)
//	stranded ReplicaSet/Deployment pod                 Act                Delete (graceful, UID precondition), carrying the
//	                                                                      taint that bars the replacement (Action.KeepsOff):
//	                                                                      the executor refuses if the node lost it since
//	  terminating, owner short, < replacement timeout  InFlight           none; NextCheck at the timeout
//	  terminating, owner short, >= timeout,            Act                ScaleDown (if ScaleBounce allowed), recording the
//	    0 replicas available                                              incident start (the node's NotReady transition) in
//	                                                                      annotation rebound.dev/scale-bounced-for
//	  ... Deployment already bounced for this incident ReportOnly         none (at most one bounce per incident, read from
//	      (scale-bounced-for >= the node's NotReady)                      the Deployment, never from status.lastActions)
//	  ... Deployment has replicas available            ReportOnly         none (a bounce would restart healthy replicas)
//	  terminating, owner fully available               Replaced           none
//	  its Deployment at 0 with the annotation          InFlight           none for the pod
//	Deployment at 0 replicas with the annotation       (any pod)          ScaleRestore, never limited
//	stranded StatefulSet pod, or RWO/RWOP volume:
//	  node not fenced                                  WaitingForFencing  none (fencing mode Watchdog: Plan.Fencing names the
//	                                                                      node; rebound's own taint counts once its re-read
//	                                                                      verified it, rescue.Fenced)
//	  fenced (out-of-service:NoExecute) but CutOff     Held               none: two signals disagree; a live node may still run
//	                                                                      the pod, and two copies are worse than a stall
//	  node fenced (out-of-service:NoExecute)           Act                ForceDelete (grace 0, UID precondition; the executor
//	                                                                      re-reads the node's taint from the API first)
//	  fencing mode Never                               ReportOnly         none
//	stranded Job / bare / other-owner pod              ReportOnly         none
//	stranded, policy suspended                         Suspended          none
//	beyond maxConcurrent or maxActionsPerMinute        RateLimited        none; NextCheck when a rate slot frees (the window
//	                                                                      is status.lastActions plus Snapshot.RecentActions,
//	                                                                      the controller's in-memory ledger)
//	policy dryRun                                      Act                listed with DryRun=true
package rescue

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/api/v1alpha1"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
	"rebound/pkg/zone"
)

// Decision is what the plan does about one critical pod on a NotReady node.
type Decision string

const (
	// DecisionSkip: a DaemonSet or mirror pod. Listed so that `diagnose`
	// can say why it is not moved, never counted as stranded.
	DecisionSkip Decision = "Skip"
	// DecisionNotYet: the node has not been NotReady for the policy's
	// maxUnavailableTime yet, and upstream will not evict the pod by then.
	DecisionNotYet Decision = "NotYet"
	// DecisionLeftToUpstream: upstream eviction moves the pod by the
	// deadline; rebound stays out of its way.
	DecisionLeftToUpstream Decision = "LeftToUpstream"
	// DecisionAct: an action for this pod is in Plan.Actions.
	DecisionAct Decision = "Act"
	// DecisionInFlight: the pod was already acted on (it is terminating, or
	// a scale bounce of its Deployment is under way); no new action.
	DecisionInFlight Decision = "InFlight"
	// DecisionReplaced: the pod is terminating and its owner has all its
	// replicas available again: the rescue is complete.
	DecisionReplaced Decision = "Replaced"
	// DecisionWaitingForFencing: a pod with identity or exclusive storage on
	// a node nobody confirmed off.
	DecisionWaitingForFencing Decision = "WaitingForFencing"
	// DecisionReportOnly: stranded, but no rule lets rebound act.
	DecisionReportOnly Decision = "ReportOnly"
	// DecisionSuspended: stranded and actionable, but the policy is
	// suspended.
	DecisionSuspended Decision = "Suspended"
	// DecisionRateLimited: actionable, but the policy's maxConcurrent or
	// maxActionsPerMinute is used up.
	DecisionRateLimited Decision = "RateLimited"
	// DecisionNoTarget: actionable, but no Ready, schedulable node admits
	// the pod's replacement; acting would only leave it Pending.
	DecisionNoTarget Decision = "NoTarget"
	// DecisionHeld: actionable, but a safety signal says that acting could
	// be worse than upstream's stall: every node is NotReady (full
	// disruption: the control plane is the likelier side cut off), the
	// node is CutOffFromAPI (a witness that reaches the API sees it alive,
	// Snapshot.Verdicts), or nothing can keep the replacement of a pod
	// rescued once this incident from landing back on the node.
	DecisionHeld Decision = "Held"
)

// CriticalPod is one critical pod bound to a NotReady node, with the
// decision about it.
type CriticalPod struct {
	Namespace, Name string
	UID             types.UID
	Node            string
	// Zone is the node's zone key (zone.DisplayZone prints it).
	Zone string
	// Policy is the RecoveryPolicy that makes the pod critical; PolicyNote
	// says how it was chosen when several select the pod.
	Policy, PolicyNote string
	Workload           Workload
	// NotReadySince is when the node's Ready condition stopped being True
	// (zero for a node the API still has Ready, see DetectedAt); Deadline
	// is when the policy's maxUnavailableTime runs out, counted from it.
	NotReadySince, Deadline time.Time
	// DetectedAt is set when the policy detects on two planes and the node
	// is dead on both and marked unreachable: Deadline counts from it
	// instead, and the action carries a TwoPlaneCheck.
	DetectedAt time.Time
	// Incident is when the node's trouble began, the scale bounce's
	// incident key: NotReadySince, or the time rebound marked the node
	// unreachable when earlier.
	Incident time.Time
	// Terminating is true when the pod has a deletionTimestamp.
	Terminating bool
	// UpstreamEviction is when kube-controller-manager evicts the pod on
	// its own (zero: never, or moot for a terminating pod);
	// UpstreamEstimated says it comes from the zone's tainting rate rather
	// than a taint on the node; UpstreamReason explains it.
	UpstreamEviction  time.Time
	UpstreamEstimated bool
	UpstreamReason    string
	// Stranded: NotReady for at least maxUnavailableTime and upstream will
	// not evict the pod by the deadline.
	Stranded bool
	Decision Decision
	// Action is the kind of the action planned for this pod now, if any.
	Action ActionKind
	// Reason says which rule decided, in words fit for an Event.
	Reason string
}

// Key returns "namespace/name".
func (c *CriticalPod) Key() string { return c.Namespace + "/" + c.Name }

// PolicyReport sums up one RecoveryPolicy in the plan; the controller writes
// it to the policy's status.
type PolicyReport struct {
	Name string
	// Valid is false when the policy cannot be used; Error says which
	// fields are wrong. An invalid policy selects no pod.
	Valid bool
	Error string
	// Suspended and DryRun echo the spec.
	Suspended, DryRun bool
	// Critical counts the pods it governs on NotReady nodes (all
	// decisions); Stranded those stranded and not yet replaced;
	// WaitingForFencing, Actions, RateLimited, NoTarget and Held those
	// decisions.
	Critical, Stranded, WaitingForFencing, Actions, RateLimited, NoTarget, Held int
	// Blocked is the reason of the first NoTarget or Held pod (by
	// namespace and name), for the policy's status.
	Blocked string
	// InFlight counts rescues under way (see limits.go), before this
	// plan's actions.
	InFlight int
	// ActionsLastMinute counts real actions in status.lastActions within
	// the minute before Now.
	ActionsLastMinute int
}

// Plan is the outcome of PlanFor.
type Plan struct {
	// Zones is the zone model's view (pkg/zone), to pass back as
	// Snapshot.PreviousZones next time.
	Zones zone.Cluster
	// Disruption is whether no node is Ready now and when the last full
	// disruption ended, to pass back as Snapshot.PreviousDisruption.
	Disruption Disruption
	// Policies reports every policy, sorted by name.
	Policies []PolicyReport
	// Critical lists every critical pod on a NotReady node with its
	// decision, sorted by namespace and name. Pods no valid policy selects
	// are not listed. DaemonSet and mirror pods are listed, with
	// DecisionSkip, so that `diagnose` can say why they stay; they never
	// count as stranded.
	Critical []CriticalPod
	// Actions are what to do now, within the limits, sorted by namespace,
	// name and kind.
	Actions []Action
	// Warnings are problems outside any policy (bad zone config, a
	// scale-bounce annotation rebound cannot use), sorted.
	Warnings []string
	// NextCheck is the earliest time the plan may change without new
	// input; zero when only new input can change it.
	NextCheck time.Time
	// Fencing lists the nodes rebound may fence itself (fencing mode
	// Watchdog), for the fencing reconciler.
	Fencing []FencingTarget
}

// FencingTarget is a node with stateful critical pods under a policy
// whose fencing mode is Watchdog.
type FencingTarget struct {
	Node string
	// Pods counts those pods.
	Pods int
	// Due: at least one of them is stranded, waiting for fencing (its
	// maxUnavailableTime has run out). The fencing reconciler may start
	// its wait before, but puts the taint on only when Due.
	Due bool
}

// planner holds one PlanFor call's working state.
type planner struct {
	snap       *Snapshot
	now        time.Time
	defaults   Defaults
	idx        snapshotIndex
	zones      zone.Cluster
	rules      []*policyRule
	critical   []CriticalPod
	candidates []candidate
	actions    []Action
	warnings   []string
	nextCheck  time.Time
	// readyNodes and totalNodes count the snapshot's nodes; no Ready node
	// means full disruption (see target.go).
	readyNodes, totalNodes int
	// targets is built on the first stranded pod that needs one.
	targets    *targetIndex
	disruption Disruption
	// firstReturn is the earliest Ready transition of the nodes Ready now
	// (zone.FullDisruptionEnd): the end of a full disruption this
	// planner may never have seen.
	firstReturn time.Time
	// leases is the Lease plane over every node (the verdicts'), and
	// grace kube-controller-manager's node grace period: a node not back
	// when a stall ends is judged only this long after the end.
	leases liveness.LeasePlane
	grace  time.Duration
	// deleteRecords are rebound's own records of its deletes
	// (DeleteRecords), read once when a pass meets a Terminating pod.
	deleteRecords []DeleteRecord
	// siblings groups the examined pods by controller and node: the
	// record of a rescue already done there (landback.go).
	siblings map[sibKey][]*corev1.Pod
	// openElsewhere caches elsewhereGate's answer per owner (open nil:
	// none), with the pod it was computed for.
	openElsewhere map[types.UID]openAnswer
	// downNodes are the nodes that can run no replacement, listed on the
	// first elsewhereGate of the pass.
	downNodes []downNode
}

// PlanFor decides, from a snapshot, which critical pods are stranded and
// what to do about them. It reads nothing but s and returns the same Plan
// for the same snapshot.
func PlanFor(s Snapshot) Plan {
	p := &planner{snap: &s, now: s.Now, defaults: s.Defaults.WithDefaults()}

	cfg := s.ZoneConfig.WithDefaults()
	if err := cfg.Validate(); err != nil {
		p.warnings = append(p.warnings, "zone config: "+err.Error())
	}
	p.grace = cfg.NodeMonitorGracePeriod
	infos, notReady, readyNodes := indexNodes(s.Nodes, s.Verdicts, s.LeaseRenewTimes)
	readyNames := make(map[string]bool, len(infos))
	for _, n := range infos {
		readyNames[n.Name] = true
	}
	p.totalNodes = len(infos)
	p.readyNodes = readyNodes
	p.leases = liveness.LeasePlaneOf(s.Verdicts, func(node string) bool { return notReady[node] != nil || readyNames[node] })
	stalled := p.totalNodes > 0 && p.leases.Stalled()
	p.disruption = Disruption{
		Active:     p.totalNodes > 0 && (p.readyNodes == 0 || stalled),
		LeaseStall: stalled,
		StartedAt:  s.PreviousDisruption.StartedAt,
		EndedAt:    s.PreviousDisruption.EndedAt,
	}
	switch prev := s.PreviousDisruption; {
	case prev.Active && !p.disruption.Active:
		p.disruption.EndedAt = s.Now
	case !prev.Active && p.disruption.Active && !prev.EndedAt.IsZero() && s.Now.Sub(prev.EndedAt) < p.grace:
		// Back within a node grace period of the last one's end: the
		// same stall, flapping; the nodes it caught stay caught.
	case !prev.Active && p.disruption.Active:
		p.disruption.StartedAt = stallStart(notReady, p.readyNodes == 0, p.leases, s.Verdicts, s.Now)
	}
	p.firstReturn = zone.FullDisruptionEnd(s.Nodes, kubestatus.NodeReadySince)
	p.zones = zone.Advance(s.PreviousZones, infos, cfg)
	p.rules = compilePolicies(s.Policies)

	// Only critical pods on NotReady nodes matter: one map lookup rules out
	// most pods (140,000 of the benchmark's 150,000), the policies most of
	// the rest.
	var found []examined
	if len(notReady) > 0 {
		for _, pod := range s.Pods {
			if pod == nil {
				continue
			}
			node := notReady[pod.Spec.NodeName]
			if node == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			rule, note := choosePolicy(p.rules, pod, s.Namespaces)
			if rule == nil || (node.early && !rule.twoPlanes) {
				// A node the API has Ready is down only for the
				// policies that detect on two planes.
				continue
			}
			found = append(found, examined{pod: pod, node: node, rule: rule, note: note})
		}
	}
	p.idx = indexOwners(&s, found)
	p.idx.notReady = notReady
	p.siblings = indexSiblings(found)
	for _, e := range found {
		p.examine(e)
	}
	p.applyLimits()
	p.planRestores()
	return p.result()
}

// clockStart is when a node's maxUnavailableTime clock started: its
// NotReady transition, or later:
//   - when rebound first saw it NotReady (the liveness verdict's Since: a
//     kubelet whose clock is behind writes an old transition, and a
//     controller restarted during an incident starts its clocks again);
//   - when its Lease went stale on rebound's clock: a node whose Lease
//     renews reaches the API, whatever its Ready flag says, and is not
//     stranded (its clock starts when the Lease stops, in the future
//     while it renews);
//   - the node grace period after the end of the last stall (every node
//     NotReady, or no Lease renewing), whether this planner saw it
//     (Disruption.EndedAt) or reads it from the nodes (firstReturn):
//     kube-controller-manager resets every node's probe time when it
//     leaves full disruption, so a node not back yet is judged only a
//     node grace period later, and the kubelets that come back one after
//     another in that time are never judged for a NotReady that the
//     stall caused.
//
// For a policy with detection TwoPlanes and a node dead on both planes and
// marked unreachable, it is the detection instead (the Lease went stale on
// rebound's own clock, so neither a kubelet's clock nor a restart can make
// it look old), still no earlier than the node grace period after a stall.
func (p *planner) clockStart(node *nodeState, rule *policyRule) time.Time {
	if tp := node.twoPlaneFor(rule); tp != nil {
		return latest(tp.DetectedAt, p.stallSettled(node), p.returnSettled(node))
	}
	return latest(node.since, node.observed, node.leaseStaleAt, p.stallSettled(node), p.returnSettled(node))
}

// stallStart is when the stall a plan sees for the first time began, as
// the snapshot records it: the last node's NotReady transition when no
// node is Ready, the last Lease going stale when none renews (the earlier
// of the two when both), never after now. A planner's first sight of a
// stall may come long after its start (no event starts a pass when the
// Leases go stale; a restarted controller).
func stallStart(notReady map[string]*nodeState, noneReady bool, leases liveness.LeasePlane, verdicts map[string]liveness.NodeVerdict, now time.Time) time.Time {
	start := now
	if noneReady {
		var last time.Time
		for _, n := range notReady {
			last = latest(last, n.since)
		}
		if !last.IsZero() && last.Before(start) {
			start = last
		}
	}
	if leases.Stalled() {
		var last time.Time
		for _, v := range verdicts {
			if v.LeaseStale {
				last = latest(last, v.LeaseStaleAt)
			}
		}
		if !last.IsZero() && last.Before(start) {
			start = last
		}
	}
	return start
}

// stallSettled is the node grace period after the end of the last stall
// this planner saw, for a node that went NotReady in it (or within a node
// grace period before it began, as the Ready flags flip one after another
// before every Lease is stale without the Lease plane); zero otherwise. A
// node NotReady long before a short stall (an API blip that flipped no
// other flag) keeps its own clock: kube-controller-manager never left
// full disruption for it, and a blip must not push its rescue back.
func (p *planner) stallSettled(node *nodeState) time.Time {
	d := p.disruption
	if d.EndedAt.IsZero() || (!d.StartedAt.IsZero() && !node.early && node.since.Before(d.StartedAt.Add(-p.grace))) {
		return time.Time{}
	}
	return d.EndedAt.Add(p.grace)
}

// returnSettled is the node grace period after the first return of the
// nodes Ready now, when every one of them returned after this node went
// NotReady (a full disruption this planner never saw may have ended
// then); zero otherwise.
func (p *planner) returnSettled(node *nodeState) time.Time {
	// A return in the future is a kubelet's clock ahead (it writes its
	// own Ready transition): it says nothing of when a stall ended.
	if p.firstReturn.IsZero() || p.firstReturn.After(p.now) || (!node.early && !p.firstReturn.After(node.since)) {
		return time.Time{}
	}
	return p.firstReturn.Add(p.grace)
}

// twoPlaneFor is the node's two-plane check when rule counts on it; nil
// otherwise.
func (n *nodeState) twoPlaneFor(rule *policyRule) *TwoPlaneCheck {
	if !rule.twoPlanes {
		return nil
	}
	return n.twoPlane
}

// clockRestartNote explains a clock that did not start at the node's
// NotReady transition; "" when it did.
func (p *planner) clockRestartNote(node *nodeState, rule *policyRule) string {
	start := p.clockStart(node, rule)
	switch {
	case node.twoPlaneFor(rule) != nil:
		return fmt.Sprintf(" (policy %s detects on two planes: the clock counts from %s, when the node's Lease went stale on rebound's clock with its gossip watchers saying dead)", rule.name, formatTime(start))
	case !start.After(node.since):
		return ""
	case start.Equal(node.leaseStaleAt) && start.After(p.now):
		return fmt.Sprintf(" (its Lease renews on rebound's clock, last seen %s: a kubelet that reaches the API is not stranded, whatever its Ready flag says; the clock starts when the Lease goes stale, at %s)", formatTime(node.leaseRenewSeen), formatTime(start))
	case start.Equal(node.leaseStaleAt):
		return fmt.Sprintf(" (the clock counts from %s, when its Lease went stale on rebound's clock: it was seen renewing after the NotReady transition)", formatTime(start))
	case start.Equal(node.observed):
		return fmt.Sprintf(" (the clock counts from %s, when rebound first saw the node NotReady: the transition time is written by the node or by an earlier controller, and rebound counts only on its own clock)", formatTime(start))
	case start.Equal(p.stallSettled(node)):
		return fmt.Sprintf(" (the clock restarted at %s, the node grace period %s after a stall ended at %s (every node NotReady, or no Lease renewing), as kube-controller-manager resets its nodes' probe times: the nodes coming back one after another are not judged before)", formatTime(start), p.grace, formatTime(p.disruption.EndedAt))
	default:
		return fmt.Sprintf(" (the clock restarted at %s, the node grace period %s after the first node Ready now returned at %s: every node Ready now was NotReady after this one went NotReady, so a full disruption may have ended then)", formatTime(start), p.grace, formatTime(p.firstReturn))
	}
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// wake records a time at which the plan changes by itself.
func (p *planner) wake(t time.Time) {
	if !t.After(p.now) {
		return
	}
	if p.nextCheck.IsZero() || t.Before(p.nextCheck) {
		p.nextCheck = t
	}
}

// result sorts everything so that equal snapshots give equal plans.
func (p *planner) result() Plan {
	slices.SortFunc(p.critical, func(a, b CriticalPod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	slices.SortFunc(p.actions, func(a, b Action) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name),
			strings.Compare(string(a.Kind), string(b.Kind)))
	})
	slices.Sort(p.warnings)
	for i := range p.critical {
		cp := &p.critical[i]
		if cp.Decision != DecisionNoTarget && cp.Decision != DecisionHeld {
			continue
		}
		for _, r := range p.rules {
			if r.name != cp.Policy {
				continue
			}
			if cp.Decision == DecisionNoTarget {
				r.report.NoTarget++
			} else {
				r.report.Held++
			}
			if r.report.Blocked == "" {
				r.report.Blocked = fmt.Sprintf("%s %s: %s", cp.Key(), cp.Decision, cp.Reason)
			}
		}
	}
	reports := make([]PolicyReport, len(p.rules))
	for i, r := range p.rules {
		reports[i] = r.report
		reports[i].Name, reports[i].Valid = r.name, r.err == nil
		if r.err != nil {
			reports[i].Error = r.err.Error()
		}
		reports[i].Suspended, reports[i].DryRun = r.suspended, r.dryRun
	}
	return Plan{
		Disruption: p.disruption,
		Zones:      p.zones,
		Policies:   reports,
		Critical:   p.critical,
		Actions:    p.actions,
		Warnings:   p.warnings,
		NextCheck:  p.nextCheck,
		Fencing:    p.fencingTargets(),
	}
}

// fencingTargets lists the nodes whose stateful critical pods are under a
// policy with fencing mode Watchdog, sorted by name.
func (p *planner) fencingTargets() []FencingTarget {
	mode := map[string]v1alpha1.FencingMode{}
	for _, r := range p.rules {
		if r.err == nil && !r.suspended && !r.dryRun {
			mode[r.name] = r.fencing
		}
	}
	byNode := map[string]*FencingTarget{}
	var out []FencingTarget
	for i := range p.critical {
		cp := &p.critical[i]
		if cp.Workload.Class != ClassStateful || mode[cp.Policy] != v1alpha1.Watchdog || cp.Terminating {
			continue
		}
		t, ok := byNode[cp.Node]
		if !ok {
			out = append(out, FencingTarget{Node: cp.Node})
			t = &out[len(out)-1]
			byNode[cp.Node] = t
		}
		t.Pods++
		if cp.Decision == DecisionWaitingForFencing {
			t.Due = true
		}
	}
	slices.SortFunc(out, func(a, b FencingTarget) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// examine lists a critical pod on a NotReady node and decides about it.
func (p *planner) examine(e examined) {
	pod, node, rule := e.pod, e.node, e.rule
	w, o := classify(pod, &p.idx)
	cp := CriticalPod{
		Namespace:     pod.Namespace,
		Name:          pod.Name,
		UID:           pod.UID,
		Node:          node.node.Name,
		Zone:          node.zone,
		Policy:        rule.name,
		PolicyNote:    e.note,
		Workload:      w,
		NotReadySince: node.since,
		Deadline:      p.clockStart(node, rule).Add(rule.maxUnavailable),
		Terminating:   pod.DeletionTimestamp != nil,
		Incident:      node.incident,
	}
	if tp := node.twoPlaneFor(rule); tp != nil {
		cp.DetectedAt = tp.DetectedAt
	}
	rule.report.Critical++

	if w.Class == ClassDaemonSet || w.Class == ClassMirror {
		// Never touched, whatever the timing: not even an ETA to compute.
		cp.Decision = DecisionSkip
		cp.Reason = skipReason(w)
		p.critical = append(p.critical, cp)
		return
	}
	if countsInFlight(pod, w, o) {
		rule.report.InFlight++
	}

	if cp.Terminating {
		// Whoever deleted it, upstream has nothing left to do, and on a
		// NotReady node the kubelet never confirms the deletion.
		cp.UpstreamReason = fmt.Sprintf("already deleted (deletion requested at %s); a NotReady node's kubelet never completes it",
			formatTime(deletionRequestedAt(pod)))
	} else if node.early {
		// Upstream has not started: its eviction comes no earlier than
		// the NotReady it decides at the end of its node grace period,
		// plus the pod's toleration; the policy asked not to wait for it.
		cp.UpstreamReason = "the API still has the node Ready: upstream evicts nothing before its node grace period runs out, the node is NotReady and the pod's toleration has passed"
	} else {
		ev := evictionFor(pod, node, &p.zones, p.now)
		cp.UpstreamEviction, cp.UpstreamEstimated, cp.UpstreamReason = ev.at, ev.estimated, ev.reason
	}

	upstreamInTime := !cp.Terminating && !cp.UpstreamEviction.IsZero() && !cp.UpstreamEviction.After(cp.Deadline)
	switch {
	case upstreamInTime:
		cp.Decision = DecisionLeftToUpstream
		cp.Reason = fmt.Sprintf("upstream eviction at %s comes by the deadline %s (NotReady since %s + maxUnavailableTime %s): left to upstream",
			formatTime(cp.UpstreamEviction), formatTime(cp.Deadline), formatTime(cp.NotReadySince), rule.maxUnavailable)
		if cp.UpstreamEstimated {
			// An estimate is counted from now and slips if the taint does
			// not come; check again at the deadline.
			p.wake(cp.Deadline)
		}
	case p.now.Before(cp.Deadline) && !cp.DetectedAt.IsZero():
		cp.Decision = DecisionNotYet
		cp.Reason = fmt.Sprintf("node %s dead on both planes for %s of maxUnavailableTime %s: stranded at %s if still dead",
			cp.Node, p.now.Sub(cp.Deadline.Add(-rule.maxUnavailable)).Round(time.Second), rule.maxUnavailable, formatTime(cp.Deadline))
		cp.Reason += p.clockRestartNote(node, rule)
		p.wake(cp.Deadline)
	case p.now.Before(cp.Deadline):
		cp.Decision = DecisionNotYet
		cp.Reason = fmt.Sprintf("node %s NotReady for %s of maxUnavailableTime %s: stranded at %s if still NotReady",
			cp.Node, p.now.Sub(cp.NotReadySince).Round(time.Second), rule.maxUnavailable, formatTime(cp.Deadline))
		cp.Reason += p.clockRestartNote(node, rule)
		p.wake(cp.Deadline)
	case node.alive != "" && w.Class == ClassStateless && !cp.Terminating:
		// Not stranded: a witness that reaches the API sees the node
		// alive, so the API, or the path to it, is what it lost. Stateful
		// pods hold on their own rule (fencing, then the signals'
		// disagreement).
		cp.Decision = DecisionHeld
		cp.Reason = fmt.Sprintf("node %s NotReady for %s, past maxUnavailableTime %s, yet a witness that reaches the API sees it alive (%s): a node seen alive is not stranded, whatever its Lease and Ready flag say; its pods stay, as upstream leaves them, and are planned again every %s and when the verdict changes",
			cp.Node, p.now.Sub(cp.NotReadySince).Round(time.Second), rule.maxUnavailable, node.alive, evidenceRecheck)
		p.wake(p.now.Add(evidenceRecheck))
	default:
		cp.Stranded = true
		p.critical = append(p.critical, cp)
		p.decideStranded(len(p.critical)-1, pod, node, rule, o)
		switch p.critical[len(p.critical)-1].Decision {
		case DecisionReplaced:
		case DecisionWaitingForFencing:
			rule.report.WaitingForFencing++
			rule.report.Stranded++
		default:
			rule.report.Stranded++
		}
		return
	}
	p.critical = append(p.critical, cp)
}

// skipReason explains why DaemonSet and mirror pods are never touched.
func skipReason(w Workload) string {
	if w.Class == ClassMirror {
		return "mirror pod of a static pod: never touched; the node's kubelet owns it and it returns with the node"
	}
	return fmt.Sprintf("DaemonSet pod (DaemonSet %s): never touched; it belongs to its node and the DaemonSet controller owns its placement", w.Name)
}

// strandedSummary is the common tail of a stranded pod's reasons.
func strandedSummary(cp *CriticalPod, maxUnavailable time.Duration, now time.Time) string {
	upstream := "never"
	if !cp.UpstreamEviction.IsZero() {
		upstream = formatTime(cp.UpstreamEviction)
	}
	if cp.Terminating {
		upstream = "moot (already deleted)"
	}
	if !cp.DetectedAt.IsZero() {
		if cp.NotReadySince.IsZero() && !cp.Terminating {
			upstream = "not before the API has the node NotReady"
		}
		return fmt.Sprintf("node %s dead on both planes for %s (detected at %s on rebound's clock, marked %s) >= maxUnavailableTime %s, upstream eviction %s",
			cp.Node, now.Sub(cp.Deadline.Add(-maxUnavailable)).Round(time.Second), formatTime(cp.DetectedAt), unreachable.TaintKey, maxUnavailable, upstream)
	}
	// The clock that ran out started at Deadline - maxUnavailableTime,
	// which is later than the transition when rebound saw the node go
	// NotReady later (a kubelet clock behind, a restart) or a full
	// disruption ended since.
	start := cp.Deadline.Add(-maxUnavailable)
	clock := ""
	if start.After(cp.NotReadySince) {
		clock = fmt.Sprintf(" counted from %s (the transition says %s)", formatTime(start), formatTime(cp.NotReadySince))
	}
	return fmt.Sprintf("node %s NotReady for %s%s >= maxUnavailableTime %s, upstream eviction %s",
		cp.Node, now.Sub(start).Round(time.Second), clock, maxUnavailable, upstream)
}

// Workloads maps "namespace/pod" to the workload of every pod in the plan,
// for the executor's Events (execute.Regarding).
func (p *Plan) Workloads() map[string]Workload {
	out := make(map[string]Workload, len(p.Critical))
	for i := range p.Critical {
		out[p.Critical[i].Key()] = p.Critical[i].Workload
	}
	return out
}
