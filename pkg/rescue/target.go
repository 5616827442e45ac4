package rescue

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// "Act only where the replacement can run." Deleting a pod whose
// replacement cannot be scheduled anywhere is worse than upstream's stall:
// the old copy was maybe still serving (the node may only be cut off from
// the API), the new one stays Pending, and when the node returns the pod
// restarts for nothing. So every action that starts or continues a rescue
// (Delete, ForceDelete, ScaleDown) first needs a target: a node that is
// Ready, schedulable, and admits the pod as kube-scheduler's filters would
// (the subset that can be decided from the snapshot):
//
//   - spec.unschedulable (cordoned), unless the pod tolerates
//     node.kubernetes.io/unschedulable:NoSchedule (NodeUnschedulable);
//   - taints with effect NoSchedule or NoExecute the pod does not tolerate
//     (TaintToleration, with component-helpers' own matcher);
//   - nodeSelector and required node affinity (NodeAffinity, with
//     component-helpers' own matcher);
//   - requests within allocatable minus the requests of the non-terminal
//     pods already bound there, and a free pod slot (NodeResourcesFit;
//     requests summed as the scheduler sums them, component-helpers'
//     PodRequests).
//
// Not modelled: inter-pod (anti-)affinity, topology spread, volume
// topology, DRA. Those can still leave the replacement Pending; the
// replacement timeout and the rule "bounce only a Deployment with no
// available replica" bound the cost. Each stranded pod is checked against
// the snapshot on its own: two pods competing for the last slot may both
// pass, and the scheduler sorts that out.
//
// When no node is Ready at all, the decision is Held, not NoTarget: that is
// kube-controller-manager's full disruption, where it evicts nothing
// because the control plane is the likelier side cut off. The hold is
// computed from the snapshot's nodes, not from the zone model's
// FullDisruptionMode flag (which can clear while every zone is still
// FullDisruption, see pkg/zone).

// noTargetRecheck is how often a NoTarget pod is checked again without new
// input: a pod that finishes on a Ready node frees room, and pod events of
// Ready nodes do not start a pass (the controller's predicates).
const noTargetRecheck = 15 * time.Second

// targetIndex is what the target search needs, built on first use: most
// plans have no stranded pod and never pay for summing every pod's requests.
type targetIndex struct {
	ready []*corev1.Node
	// used sums the requests of the non-terminal pods bound to each Ready
	// node; pods counts them.
	used map[string]corev1.ResourceList
	pods map[string]int64
}

// buildTargets indexes the Ready nodes and what is already requested on
// them: Snapshot.Usage when the caller keeps it, else summed from
// Snapshot.Pods.
func buildTargets(s *Snapshot, notReady map[string]*nodeState) *targetIndex {
	t := &targetIndex{used: map[string]corev1.ResourceList{}, pods: map[string]int64{}}
	for _, n := range s.Nodes {
		if n != nil && notReady[n.Name] == nil {
			t.ready = append(t.ready, n)
			t.used[n.Name] = corev1.ResourceList{}
		}
	}
	slices.SortFunc(t.ready, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	if s.Usage != nil {
		for name, used := range t.used {
			u := s.Usage[name]
			for r, q := range u.Requested {
				used[r] = q.DeepCopy()
			}
			t.pods[name] = u.Pods
		}
		return t
	}
	for _, pod := range s.Pods {
		node, req, ok := PodUsage(pod)
		if !ok {
			continue
		}
		used, ok := t.used[node]
		if !ok {
			continue
		}
		addRequests(used, req)
		t.pods[node]++
	}
	return t
}

// NodeUsage is what the pods bound to one node request, as the scheduler
// counts it, and how many they are.
type NodeUsage struct {
	Requested corev1.ResourceList
	Pods      int64
}

// PodUsage is what pod takes up on its node: the node, and the requests
// the scheduler counts for it (component-helpers' PodRequests). ok is
// false for a pod that takes nothing: not bound, or finished (Succeeded,
// Failed). A terminating pod still holds its resources until it is gone,
// as the scheduler counts it. The one rule for buildTargets and for a
// caller's Snapshot.Usage.
func PodUsage(pod *corev1.Pod) (node string, requests corev1.ResourceList, ok bool) {
	if pod == nil || pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return "", nil, false
	}
	return pod.Spec.NodeName, resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}), true
}

// Add counts a pod's requests (from PodUsage) in u.
func (u *NodeUsage) Add(requests corev1.ResourceList) {
	if u.Requested == nil {
		u.Requested = corev1.ResourceList{}
	}
	addRequests(u.Requested, requests)
	u.Pods++
}

// Remove takes back what Add counted.
func (u *NodeUsage) Remove(requests corev1.ResourceList) {
	for name, q := range requests {
		sum := u.Requested[name]
		sum.Sub(q)
		u.Requested[name] = sum
	}
	u.Pods--
}

func addRequests(sum, requests corev1.ResourceList) {
	for name, q := range requests {
		v := sum[name]
		v.Add(q)
		sum[name] = v
	}
}

// rejection is why one Ready node cannot take a pod.
type rejection struct {
	node, why string
}

// findTarget returns the first Ready node (by name) that admits a
// replacement of pod, or every node's rejection.
func (t *targetIndex) findTarget(pod *corev1.Pod) (string, []rejection) {
	var rejected []rejection
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for _, n := range t.ready {
		why := t.admits(n, pod, affinity, requests)
		if why == "" {
			return n.Name, nil
		}
		rejected = append(rejected, rejection{node: n.Name, why: why})
	}
	return "", rejected
}

// admits returns "" when node n admits pod, else the first filter that
// refuses it, in words that group well ("cordoned", "insufficient cpu").
func (t *targetIndex) admits(n *corev1.Node, pod *corev1.Pod, affinity nodeaffinity.RequiredNodeAffinity, requests corev1.ResourceList) string {
	log := logr.Discard()
	if n.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(log, pod.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, true) {
		return "cordoned (spec.unschedulable)"
	}
	if taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(log, n.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, true); untolerated {
		return fmt.Sprintf("taint %s not tolerated", taintString(&taint))
	}
	if ok, err := affinity.Match(n); err != nil || !ok {
		return "nodeSelector/required node affinity not matched"
	}
	alloc := n.Status.Allocatable
	if maxPods, ok := alloc[corev1.ResourcePods]; ok && t.pods[n.Name]+1 > maxPods.Value() {
		return fmt.Sprintf("too many pods (%d of %s)", t.pods[n.Name], maxPods.String())
	}
	names := make([]corev1.ResourceName, 0, len(requests))
	for name := range requests {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		want := requests[name]
		if want.IsZero() || name == corev1.ResourcePods {
			continue
		}
		free := alloc[name].DeepCopy()
		free.Sub(t.used[n.Name][name])
		if want.Cmp(free) > 0 {
			if free.Sign() < 0 {
				free = resource.Quantity{}
			}
			return fmt.Sprintf("insufficient %s (requests %s, free %s)", name, want.String(), free.String())
		}
	}
	return ""
}

func taintString(t *corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// summarizeRejections groups the nodes by reason, a few names each, so
// that the reason stays readable with a thousand nodes. NotReady nodes are
// counted, not listed one by one.
func summarizeRejections(rejected []rejection, notReady int) string {
	var groups []string
	byWhy := map[string][]string{}
	for _, r := range rejected {
		if _, ok := byWhy[r.why]; !ok {
			groups = append(groups, r.why)
		}
		byWhy[r.why] = append(byWhy[r.why], r.node)
	}
	slices.Sort(groups)
	parts := make([]string, 0, len(groups)+1)
	for _, g := range groups {
		parts = append(parts, g+": "+nodeList(byWhy[g]))
	}
	if notReady > 0 {
		parts = append(parts, fmt.Sprintf("NotReady: %d node(s)", notReady))
	}
	if len(parts) == 0 {
		return "the cluster has no node"
	}
	return strings.Join(parts, "; ")
}

// nodeList names up to three nodes and counts the rest.
func nodeList(nodes []string) string {
	const shown = 3
	if len(nodes) <= shown {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(nodes[:shown], ", "), len(nodes)-shown)
}

// target decides whether an action for the stranded pod cp may be proposed
// at all: not in full disruption, and only with a target. It returns the
// first node that admits the pod, or "" after setting the decision (Held or
// NoTarget) when the action is held.
func (p *planner) target(cp *CriticalPod, pod *corev1.Pod) string {
	if p.readyNodes == 0 {
		p.report(cp, DecisionHeld, "every node is NotReady (%d of %d): like kube-controller-manager in full disruption, rebound evicts nothing, because the control plane is the likelier side cut off and a replacement could run nowhere; held until a node is Ready again",
			p.totalNodes, p.totalNodes)
		return ""
	}
	if p.targets == nil {
		p.targets = buildTargets(p.snap, p.idx.notReady)
	}
	node, rejected := p.targets.findTarget(pod)
	if node == "" {
		p.report(cp, DecisionNoTarget, "no Ready node can run the replacement (%s): rebound does not act, because a deleted pod would only stay Pending; re-checked whenever a node changes, and every %s",
			summarizeRejections(rejected, len(p.idx.notReady)), noTargetRecheck)
		// Pods leaving a Ready node free room without any node event.
		p.wake(p.now.Add(noTargetRecheck))
	}
	return node
}
