package rescue

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"rebound/pkg/unreachable"
)

// A rescue deletes a pod so that its owner creates a replacement on a
// Ready node. The scheduler has no filter for Ready: only a taint the
// replacement does not tolerate (kube-controller-manager's
// node.kubernetes.io/unreachable or not-ready NoSchedule, rebound's own
// rebound.dev/unreachable), or a cordon, keeps it off the node the pod was
// rescued from. A replacement that lands back there is stranded again the
// moment it is bound, and a planner that deleted it again would delete in
// a loop (one rescue, four deletes, all left Terminating on the dead node).
// So before a delete the node must bar the replacement; where it does not
// yet, the planner waits for the taint; where no taint can (the pod
// tolerates every taint), it deletes at most once per incident, reading
// "once" from the cluster (a Terminating pod of the same owner on the
// node, or a pod of it created there since the incident began), so that
// a restarted controller holds as well.

// sibKey groups the examined pods by controller and node.
type sibKey struct {
	owner types.UID
	node  string
}

// indexSiblings groups the examined pods by owner and node.
func indexSiblings(found []examined) map[sibKey][]*corev1.Pod {
	out := make(map[sibKey][]*corev1.Pod)
	for _, e := range found {
		uid, kind := ownerOf(e.pod)
		if kind == "" {
			continue
		}
		k := sibKey{uid, e.pod.Spec.NodeName}
		out[k] = append(out[k], e.pod)
	}
	return out
}

// barrier is what keeps a replacement of pod off node n.
type barrier struct {
	// keepsOff is the taint that bars the replacement now (for a cordon,
	// node.kubernetes.io/unschedulable:NoSchedule, the form the scheduler
	// checks it in); nil when nothing does.
	keepsOff *corev1.Taint
	// awaited is, when nothing bars it yet, the taint kube-controller-
	// manager puts on the node for its Ready status, which the pod does
	// not tolerate; nil when the pod tolerates it as well: no taint can
	// keep the replacement off.
	awaited *corev1.Taint
}

// barrierOf applies the scheduler's own tests (component-helpers, as
// target.go's) with the pod's tolerations, which its replacement shares.
func barrierOf(pod *corev1.Pod, n *corev1.Node, readyStatus corev1.ConditionStatus) barrier {
	if t := keepsOffNow(pod, n); t != nil {
		return barrier{keepsOff: ptr(*t)}
	}
	awaited := ptr(NotReadyTaint(readyStatus))
	if readyStatus == corev1.ConditionTrue {
		// A node the API has Ready gets no taint from upstream yet; only
		// rebound's own mark (pkg/unreachable) could come.
		awaited = &corev1.Taint{Key: unreachable.TaintKey, Effect: corev1.TaintEffectNoSchedule}
	}
	if tolerates(pod, awaited) {
		return barrier{}
	}
	return barrier{awaited: awaited}
}

// keepsOffNow is the scheduler's taint and cordon test: the taint that
// keeps pod (or its replacement) off n now, the cordon in the form the
// scheduler checks it (unschedulableTaint); nil when none does. It
// allocates nothing: the elsewhere gate runs it per owner over every
// down node. The result points into n or at unschedulableTaint: copy it
// to keep it.
func keepsOffNow(pod *corev1.Pod, n *corev1.Node) *corev1.Taint {
	if n.Spec.Unschedulable && !tolerates(pod, &unschedulableTaint) {
		return &unschedulableTaint
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && !tolerates(pod, t) {
			return t
		}
	}
	return nil
}

// tolerates is component-helpers' toleration test (the scheduler's).
func tolerates(pod *corev1.Pod, t *corev1.Taint) bool {
	return corev1helpers.TolerationsTolerateTaint(logr.Discard(), pod.Spec.Tolerations, t, true)
}

// NotReadyTaint is the NoSchedule taint kube-controller-manager puts on
// a node whose Ready condition has status readyStatus, at once and
// whatever its zone's state (its TaintNodeByCondition pass):
// node.kubernetes.io/not-ready for False, node.kubernetes.io/unreachable
// for Unknown or no condition.
func NotReadyTaint(readyStatus corev1.ConditionStatus) corev1.Taint {
	key := corev1.TaintNodeUnreachable
	if readyStatus == corev1.ConditionFalse {
		key = corev1.TaintNodeNotReady
	}
	return corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule}
}

func ptr[T any](v T) *T { return &v }

// KeepsOff reports whether node n, as read now, still bars a replacement
// the way the plan's taint did (Action.KeepsOff): the executor's re-check
// before a delete.
func KeepsOff(n *corev1.Node, t *corev1.Taint) bool {
	if t.Key == corev1.TaintNodeUnschedulable && t.Effect == corev1.TaintEffectNoSchedule && n.Spec.Unschedulable {
		return true
	}
	return slices.ContainsFunc(n.Spec.Taints, func(have corev1.Taint) bool { return have.MatchTaint(t) })
}

// sourceGate decides whether the delete (or scale bounce) candidate c
// may go ahead as far as the node it is rescued from goes: ok with the
// barrier recorded on the action, or a decision (NotYet or Held) set.
func (p *planner) sourceGate(c *candidate) bool {
	cp := &p.critical[c.pod]
	node := p.idx.notReady[cp.Node]
	if node == nil {
		return true
	}
	b := barrierOf(c.obj, node.node, node.readyStatus)
	switch {
	case b.keepsOff != nil:
		c.act.KeepsOff = b.keepsOff
		if c.act.Kind != ActionScaleDown {
			c.act.Reason += fmt.Sprintf("; node %s carries %s, which the replacement does not tolerate, so it cannot land back there",
				cp.Node, keepsOffString(b.keepsOff))
		}
		return true
	case b.awaited != nil:
		p.report(cp, DecisionNotYet, "waiting for node %s to be tainted %s, so that the replacement cannot land back on it (the scheduler has no Ready filter: without the taint it may put the replacement on the NotReady node, and a second rescue would follow); re-planned when the node changes, and every %s; then: %s",
			cp.Node, taintString(b.awaited), noTargetRecheck, c.act.Reason)
		p.wake(p.now.Add(noTargetRecheck))
		return false
	}
	if done := p.rescuedThisIncident(c.obj, node); done != "" {
		p.report(cp, DecisionHeld, "the pod tolerates every taint that could keep its replacement off node %s (a toleration with operator Exists and no key tolerates them all), so a replacement can land back on the NotReady node, and %s: rebound rescues such a pod at most once per incident and holds now rather than delete in a loop; it runs again when the node returns, or remove the node (or the toleration) to move it",
			cp.Node, done)
		return false
	}
	if c.act.Kind != ActionScaleDown {
		c.act.Reason += fmt.Sprintf("; no taint can keep the replacement off node %s (the pod tolerates every taint): deleted at most once for this incident, then held",
			cp.Node)
	}
	return true
}

// elsewhereGate is sourceGate for every other node that cannot run the
// replacement, once a target is found (a pod with no target is NoTarget,
// the plainer story). Nodes of one outage go NotReady, and get upstream's
// NoSchedule taint, one after another (kube-controller-manager walks them
// a monitor period apart, slower when it is loaded), and a node whose
// kubelet just lost the API is Ready until its grace runs out. A delete
// in that gap lets the scheduler bind the replacement to a node that
// cannot run it, where it sits as the pod did (and, with evidence that
// the node lives, is held there). So the candidate waits until every such
// node bars the replacement, or can run it again. A node no taint can bar
// (the pod tolerates them all) does not hold it: sourceGate's once per
// incident covers that pod. Pods of one owner share their tolerations and
// node affinity, so the answer is computed once per owner and pass, and
// reused only for a pod whose terms match (sameSchedulingTerms).
func (p *planner) elsewhereGate(c *candidate) bool {
	cp := &p.critical[c.pod]
	key, _ := ownerOf(c.obj)
	if key == "" {
		key = c.obj.UID
	}
	if p.openElsewhere == nil {
		p.openElsewhere = map[types.UID]openAnswer{}
	}
	var open *openNode
	if a, seen := p.openElsewhere[key]; seen && sameSchedulingTerms(a.pod, c.obj) {
		open = a.open
	} else {
		// A pod of the owner with other tolerations or node affinity (an
		// adopted orphan, a webhook's per-pod change) gets its own answer.
		open = p.findOpenElsewhere(c.obj)
		if !seen {
			p.openElsewhere[key] = openAnswer{pod: c.obj, open: open}
		}
	}
	if open == nil {
		return true
	}
	p.report(cp, DecisionNotYet, "waiting for node %s to be tainted %s, or to be able to run pods again: it cannot run the replacement (%s) and nothing keeps the replacement off it yet (the scheduler has no Ready filter: it may bind the replacement there, where it would sit as this pod does); re-planned when the node changes, and every %s; then: %s",
		open.name, taintString(open.awaited), open.why, noTargetRecheck, c.act.Reason)
	p.wake(p.now.Add(noTargetRecheck))
	return false
}

// openAnswer is elsewhereGate's answer for an owner, and the pod it was
// computed for.
type openAnswer struct {
	pod  *corev1.Pod
	open *openNode
}

// sameSchedulingTerms reports whether pods a and b meet findOpenElsewhere's
// tests alike: the same tolerations, nodeSelector and node affinity.
func sameSchedulingTerms(a, b *corev1.Pod) bool {
	if a == b {
		return true
	}
	var na, nb *corev1.NodeAffinity
	if a.Spec.Affinity != nil {
		na = a.Spec.Affinity.NodeAffinity
	}
	if b.Spec.Affinity != nil {
		nb = b.Spec.Affinity.NodeAffinity
	}
	return apiequality.Semantic.DeepEqual(a.Spec.Tolerations, b.Spec.Tolerations) &&
		apiequality.Semantic.DeepEqual(a.Spec.NodeSelector, b.Spec.NodeSelector) &&
		apiequality.Semantic.DeepEqual(na, nb)
}

// openNode is a node that cannot run a replacement of some pod but would
// admit it: no taint or cordon bars it, and the pod's required node
// affinity matches it.
type openNode struct {
	name, why string
	// awaited is the taint that would bar it (barrier.awaited).
	awaited *corev1.Taint
}

// findOpenElsewhere returns the first node (by name) that cannot run a
// replacement of pod but admits it, by the scheduler's own taint, cordon
// and node affinity tests; nil when none. Room is not checked: a full node
// may free room before the scheduler binds.
func (p *planner) findOpenElsewhere(pod *corev1.Pod) *openNode {
	if p.downNodes == nil {
		p.downNodes = p.listDownNodes()
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	for i := range p.downNodes {
		d := &p.downNodes[i]
		if keepsOffNow(pod, d.node) != nil || tolerates(pod, &d.awaited) {
			continue
		}
		if ok, err := affinity.Match(d.node); err == nil && !ok {
			continue
		}
		return &openNode{name: d.node.Name, why: d.why, awaited: &d.awaited}
	}
	return nil
}

// unschedulableTaint is the form the scheduler checks a cordon in.
var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// downNode is a node that can run no replacement (notTargetWhy).
type downNode struct {
	node *corev1.Node
	why  string
	// awaited is the taint that comes to bar replacements: upstream's
	// for its Ready condition when NotReady; upstream's unreachable for a
	// Ready node whose Lease is stale (it marks it Unknown once its grace
	// runs out); rebound's own mark for one dead on both planes.
	awaited corev1.Taint
}

// listDownNodes lists the snapshot's nodes that can run no replacement,
// by name.
func (p *planner) listDownNodes() []downNode {
	out := []downNode{}
	for _, n := range p.snap.Nodes {
		if n == nil {
			continue
		}
		why := notTargetWhy(n, p.snap, p.idx.notReady)
		if why == "" {
			continue
		}
		d := downNode{node: n, why: why, awaited: corev1.Taint{Key: unreachable.TaintKey, Effect: corev1.TaintEffectNoSchedule}}
		if st := p.idx.notReady[n.Name]; st != nil {
			d.awaited = NotReadyTaint(st.readyStatus)
		} else if why == whyLeaseUnconfirmed {
			d.awaited = NotReadyTaint(corev1.ConditionUnknown)
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b downNode) int { return strings.Compare(a.node.Name, b.node.Name) })
	return out
}

// rescuedThisIncident says how the cluster records a rescue of pod's
// owner off node since the node's trouble began (its incident): pod
// itself Terminating with its deletion requested since; pod itself
// created since, bound to the node: a replacement that landed back; or,
// for a pod of unknown age, another pod of its owner on the node deleted
// since. "" when none: whoever deleted, a
// second delete would only repeat what did not move the pod.
func (p *planner) rescuedThisIncident(pod *corev1.Pod, node *nodeState) string {
	since := node.incident
	uid, kind := ownerOf(pod)
	if pod.DeletionTimestamp != nil && !deletionRequestedAt(pod).Before(since) {
		return fmt.Sprintf("the pod itself was deleted at %s, after the node's trouble began at %s", formatTime(deletionRequestedAt(pod)), formatTime(since))
	}
	if !pod.CreationTimestamp.Time.Before(since) && !pod.CreationTimestamp.IsZero() {
		return fmt.Sprintf("the pod itself was created at %s, after the node's trouble began at %s, and bound to it: a replacement that landed back", formatTime(pod.CreationTimestamp.Time), formatTime(since))
	}
	// A pod created before the incident is an original replica, never a
	// replacement: its sibling's rescue is no record of its own (a delete
	// that failed, a restart between two). Only a pod whose creation
	// time is unknown is judged by its siblings (the side that holds).
	if kind == "" || !pod.CreationTimestamp.IsZero() {
		return ""
	}
	for _, s := range p.siblings[sibKey{uid, node.node.Name}] {
		if s == pod || s.DeletionTimestamp == nil {
			continue
		}
		if at := deletionRequestedAt(s); !at.Before(since) {
			return fmt.Sprintf("pod %s of the same %s on that node was deleted at %s, after the node's trouble began at %s (its replacement is this pod, or may land there too)",
				s.Name, kind, formatTime(at), formatTime(since))
		}
	}
	return ""
}

// keepsOffString names a barrier for people.
func keepsOffString(t *corev1.Taint) string {
	if t.Key == corev1.TaintNodeUnschedulable && t.Effect == corev1.TaintEffectNoSchedule {
		return "a cordon (spec.unschedulable)"
	}
	return "taint " + taintString(t)
}

// evidenceRecheck is how often a pod held by evidence of life is planned
// again without new input: the verdict carries no expiry of its evidence,
// so the planner looks again, and a verdict that no longer holds lets it
// act at once (the pod's maxUnavailableTime has long run out).
const evidenceRecheck = noTargetRecheck
