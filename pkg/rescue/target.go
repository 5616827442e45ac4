package rescue

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fw "k8s.io/kube-scheduler/framework"

	"rebound/pkg/unreachable"
)

// "Act only where the replacement can run." Deleting a pod whose
// replacement cannot be scheduled anywhere is worse than upstream's stall:
// the old copy was maybe still serving (the node may only be cut off from
// the API), the new one stays Pending, and when the node returns the pod
// restarts for nothing. So every action that starts or continues a rescue
// (Delete, ForceDelete, ScaleDown) first needs a target: a node that is
// Ready, schedulable, and admits the pod as kube-scheduler's filters would
// (the subset that can be decided from the snapshot), in the scheduler's
// order:
//
//   - spec.unschedulable (cordoned), unless the pod tolerates
//     node.kubernetes.io/unschedulable:NoSchedule (NodeUnschedulable);
//   - taints with effect NoSchedule or NoExecute the pod does not tolerate
//     (TaintToleration, with component-helpers' own matcher);
//   - nodeSelector and required node affinity (NodeAffinity, with
//     component-helpers' own matcher);
//   - host ports: those of the containers and sidecars (HostPorts) against
//     those of the pods bound there (NodePorts, with kube-scheduler's own
//     HostPortInfo and its 0.0.0.0 rule);
//   - requests within allocatable minus the requests of the non-terminal
//     pods already bound there, and a free pod slot (NodeResourcesFit;
//     requests summed as the scheduler sums them, component-helpers'
//     PodRequests);
//   - required inter-pod affinity and anti-affinity (InterPodAffinity's
//     filter, rule for rule: the existing pods' required anti-affinity
//     against the pod, the pod's required anti-affinity, and its required
//     affinity, with the plugin's exception for the first pod of a group
//     that matches its own terms). Terms are parsed and matched by
//     kube-scheduler's framework (AffinityTerm: label selector,
//     namespaces, namespaceSelector read against Snapshot.Namespaces) and
//     counted per topology pair (topologyKey and the node's value) over
//     every bound, unfinished pod, those of NotReady nodes included: the
//     scheduler counts them too, and a pod deleted gracefully on a
//     NotReady node stays there, Terminating, until its node returns. A
//     force-deleted pod (grace 0) is gone at once, so its own replacement
//     does not count it.
//
// Targets add up. A pass plans many replacements against the same free
// room, so each one it admits is reserved on its target node: its
// requests, a pod slot, its host ports, and the pod itself (labels and
// anti-affinity terms) for the pods checked after it; a later pod that no
// longer fits is NoTarget with a reason that names the reservation. A
// pod that ends up without an action (suspended policy, rate-limited)
// gives its room back. Before the first of this pass's pods, the room set
// in motion by earlier passes is reserved too, so that a second pass does
// not delete more towards the same slot:
//
//   - every Pending pod (not bound to a node, not finished, not
//     terminating, not held by scheduling gates), on the first Ready node
//     (by name) that admits it: it will take room somewhere, and the first
//     fit is what these checks would plan for it. The scheduler may pick
//     another node; that changes which node is full, not how much room
//     the cluster has, so it misleads only a replacement that fits on
//     fewer nodes than the Pending pod does. A Pending pod that no Ready
//     node admits takes no room here (the scheduler cannot place it
//     either);
//   - every replacement not yet seen: a stranded pod already deleted
//     whose ReplicaSet or Deployment is not fully available again counts
//     as a replacement still to come, unless its ReplicaSet already has as
//     many Pending pods (per ReplicaSet: the larger of the two counts), so
//     that a pass that runs before the cache shows the replacement does
//     not hand its room to another pod. A replacement that is already
//     bound but not available yet is counted twice (on its node, and
//     here) until it is available: room is under-estimated for that while,
//     never over-estimated.
//
// A scale bounce deletes every pod of its Deployment, Pending ones
// included, so its own check ignores what its ReplicaSet reserved.
//
// Pods the check needs: the Ready nodes' pods for host ports and
// inter-pod terms, and the Pending pods. With Snapshot.Usage (the
// controller's running sums) the requests come from the sums; a Ready
// node for which Snapshot.Pods holds fewer bound pods than Usage counts is
// not known pod by pod, and no pod with host ports or required inter-pod
// terms is placed there (nor in a topology domain that contains it). The
// existing pods' anti-affinity can only be read from the pods the snapshot
// holds.
//
// Not modelled: topology spread, volume topology and limits, DRA,
// preemption. Those can still leave the replacement Pending; the
// replacement timeout and the rule "bounce only a Deployment with no
// available replica" bound the cost.
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
// plans have no stranded pod and never pay for summing every pod's
// requests. Until then it only collects the replacements still to come
// (addInFlight).
type targetIndex struct {
	built bool
	snap  *Snapshot
	ready []*corev1.Node
	rooms map[string]*room
	// nodeLabels are every node's labels, NotReady ones too: topology
	// domains span both.
	nodeLabels map[string]map[string]string
	namespaces map[string]map[string]string
	// placed are the bound, unfinished pods by namespace, for the
	// incoming pod's inter-pod terms; built on the first pod that has
	// some. anti are those with required anti-affinity terms.
	placed      map[string][]placedPod
	placedBuilt bool
	anti        []placedTerms
	// unknown are the topology pairs of the Ready nodes whose pods the
	// snapshot does not hold (see room.partial).
	unknown map[topologyPair]bool
	pending []*corev1.Pod
	// inFlight are stranded pods already deleted whose owner is short:
	// their replacements may not be in the snapshot yet.
	inFlight []*corev1.Pod
	// slots are the reservations of this pass, in order; antiSlots counts
	// those whose pod has required anti-affinity terms.
	slots     []slot
	antiSlots int
	// terms caches each pod's parsed inter-pod terms, bases the existing
	// pods' inter-pod counts by interPod.baseKey.
	terms map[*corev1.Pod]*podTerms
	bases map[string]*interCounts
}

// room is one Ready node: what its pods take, before reservations.
type room struct {
	node  *corev1.Node
	used  corev1.ResourceList
	pods  int64
	ports fw.HostPortInfo
	// partial: Snapshot.Usage counts more pods on the node than
	// Snapshot.Pods holds, so its host ports and labels are not known.
	partial bool
	// slots index targetIndex.slots reserved on this node.
	slots []int
}

// slot is room reserved on a node for a pod to come.
type slot struct {
	node     string
	pod      *corev1.Pod
	requests corev1.ResourceList
	ports    []corev1.ContainerPort
	// owner is the controller UID of the pod (its own UID without one):
	// a scale bounce of that owner ignores the slot.
	owner types.UID
	// who names the reservation in reasons.
	who string
}

type placedPod struct {
	pod  *corev1.Pod
	node string
}

type placedTerms struct {
	placedPod
	terms []fw.AffinityTerm
}

type topologyPair struct{ key, value string }

// podTerms are a pod's required inter-pod terms, parsed by kube-scheduler's
// framework.
type podTerms struct {
	affinity, anti []fw.AffinityTerm
	// anyNamespaceSelector: some term selects namespaces by label, so
	// every namespace's pods are candidates.
	anyNamespaceSelector bool
	err                  error
}

// notTargetWhy says why node n can take no replacement whatever its room
// ("" when it can): NotReady, judged dead early, or Ready with its Lease
// not seen renewing (its kubelet does not reach the API; the Ready flag
// has not caught up).
func notTargetWhy(n *corev1.Node, s *Snapshot, notReady map[string]*nodeState) string {
	v := s.Verdicts[n.Name]
	switch {
	case notReady[n.Name] != nil:
		return "NotReady"
	case unreachable.DeadEarly(n, v):
		return "dead on both planes"
	case v.LeaseUnconfirmed():
		return whyLeaseUnconfirmed
	}
	return ""
}

const whyLeaseUnconfirmed = "Ready, but its Lease not seen renewing"

// addInFlight records a stranded pod whose deletion is under way and whose
// owner is not fully available: its replacement takes room, seen or not.
func (p *planner) addInFlight(pod *corev1.Pod) {
	p.targetIndex().inFlight = append(p.targetIndex().inFlight, pod)
}

func (p *planner) targetIndex() *targetIndex {
	if p.targets == nil {
		p.targets = &targetIndex{}
	}
	return p.targets
}

// build indexes the Ready nodes and what is already requested on them
// (Snapshot.Usage when the caller keeps it, else summed from
// Snapshot.Pods), their host ports, the Pending pods, and then reserves
// the room of earlier passes.
func (t *targetIndex) build(s *Snapshot, notReady map[string]*nodeState) {
	t.built, t.snap = true, s
	t.rooms = map[string]*room{}
	t.nodeLabels = make(map[string]map[string]string, len(s.Nodes))
	t.namespaces = s.Namespaces
	t.terms = map[*corev1.Pod]*podTerms{}
	t.bases = map[string]*interCounts{}
	for _, n := range s.Nodes {
		if n == nil {
			continue
		}
		t.nodeLabels[n.Name] = n.Labels
		if notTargetWhy(n, s, notReady) == "" {
			t.ready = append(t.ready, n)
			t.rooms[n.Name] = &room{node: n, used: corev1.ResourceList{}}
		}
	}
	slices.SortFunc(t.ready, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, pod := range s.Pods {
		if pod == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if pod.Spec.NodeName == "" {
			if pod.DeletionTimestamp == nil && len(pod.Spec.SchedulingGates) == 0 {
				t.pending = append(t.pending, pod)
			}
			continue
		}
		if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			if pt := t.termsOf(pod); pt.err == nil && len(pt.anti) > 0 {
				t.anti = append(t.anti, placedTerms{placedPod{pod, pod.Spec.NodeName}, pt.anti})
			}
		}
		r := t.rooms[pod.Spec.NodeName]
		if r == nil {
			continue
		}
		r.pods++
		for _, hp := range HostPorts(pod) {
			if r.ports == nil {
				r.ports = fw.HostPortInfo{}
			}
			r.ports.Add(hp.HostIP, string(hp.Protocol), hp.HostPort)
		}
		if s.Usage == nil {
			addRequests(r.used, resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
		}
	}
	if s.Usage != nil {
		for name, r := range t.rooms {
			u := s.Usage[name]
			for res, q := range u.Requested {
				r.used[res] = q.DeepCopy()
			}
			if u.Pods > r.pods {
				r.partial = true
				for k, v := range r.node.Labels {
					if t.unknown == nil {
						t.unknown = map[topologyPair]bool{}
					}
					t.unknown[topologyPair{k, v}] = true
				}
			}
			r.pods = max(r.pods, u.Pods)
		}
	}
	t.reserveEarlierPasses()
}

// reserveEarlierPasses reserves the Pending pods, then the replacements
// not seen yet (see the comment at the top).
func (t *targetIndex) reserveEarlierPasses() {
	byName := func(a, b *corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	}
	slices.SortFunc(t.pending, byName)
	pendingOf := map[types.UID]int{}
	// Pods of one owner share a template, and room only shrinks: once one
	// fits nowhere, the next does not either (thousands of unschedulable
	// Pending pods cost one search per owner). A DaemonSet's pods differ
	// by node, and a pod with required pod affinity may fit once a pod it
	// follows is reserved, so those are always checked.
	fitsNowhere := map[types.UID]bool{}
	for _, pod := range t.pending {
		owner, kind := ownerOf(pod)
		pendingOf[owner]++
		if fitsNowhere[owner] {
			continue
		}
		node, _ := t.findTarget(pod, findOptions{})
		if node == "" {
			if a := pod.Spec.Affinity; kind != "DaemonSet" && (a == nil || a.PodAffinity == nil) {
				fitsNowhere[owner] = true
			}
			continue
		}
		t.reserve(node, pod, "Pending pod "+pod.Namespace+"/"+pod.Name)
	}
	slices.SortFunc(t.inFlight, byName)
	for _, pod := range t.inFlight {
		owner, _ := ownerOf(pod)
		if pendingOf[owner] > 0 {
			// A Pending pod of the same ReplicaSet stands for it.
			pendingOf[owner]--
			continue
		}
		if node, _ := t.findTarget(pod, findOptions{}); node != "" {
			t.reserve(node, pod, "the replacement of "+pod.Namespace+"/"+pod.Name+" (deleted, not yet available)")
		}
	}
}

// ownerOf is the UID that groups a pod with its siblings: its controller's,
// else its own.
func ownerOf(pod *corev1.Pod) (types.UID, string) {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && ref.UID != "" {
		return ref.UID, ref.Kind
	}
	return pod.UID, ""
}

// HostPorts are the host ports a pod takes on its node: those of its
// containers and of its sidecars (init containers with restartPolicy
// Always), as kube-scheduler's NodePorts counts them. The controller's pod
// cache keeps these.
func HostPorts(pod *corev1.Pod) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			continue
		}
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				out = append(out, p)
			}
		}
	}
	for i := range pod.Spec.Containers {
		for _, p := range pod.Spec.Containers[i].Ports {
			if p.HostPort > 0 {
				out = append(out, p)
			}
		}
	}
	return out
}

// termsOf parses a pod's required inter-pod terms once per plan.
func (t *targetIndex) termsOf(pod *corev1.Pod) *podTerms {
	if pt, ok := t.terms[pod]; ok {
		return pt
	}
	pt := &podTerms{}
	aff, anti := fw.GetPodAffinityTerms(pod.Spec.Affinity), fw.GetPodAntiAffinityTerms(pod.Spec.Affinity)
	for _, v1Terms := range [][]corev1.PodAffinityTerm{aff, anti} {
		for i := range v1Terms {
			if v1Terms[i].NamespaceSelector != nil {
				pt.anyNamespaceSelector = true
			}
		}
	}
	if pt.affinity, pt.err = fw.GetAffinityTerms(pod, aff); pt.err == nil {
		pt.anti, pt.err = fw.GetAffinityTerms(pod, anti)
	}
	t.terms[pod] = pt
	return pt
}

// buildPlaced indexes every bound, unfinished pod by namespace.
func (t *targetIndex) buildPlaced(s *Snapshot) {
	t.placedBuilt = true
	t.placed = map[string][]placedPod{}
	for _, pod := range s.Pods {
		if pod == nil || pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		t.placed[pod.Namespace] = append(t.placed[pod.Namespace], placedPod{pod, pod.Spec.NodeName})
	}
}

// reserve takes room on node for pod (or its replacement) and returns the
// slot's index.
func (t *targetIndex) reserve(node string, pod *corev1.Pod, who string) int {
	owner, _ := ownerOf(pod)
	t.slots = append(t.slots, slot{
		node: node, pod: pod, owner: owner, who: who,
		requests: resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}),
		ports:    HostPorts(pod),
	})
	i := len(t.slots) - 1
	r := t.rooms[node]
	r.slots = append(r.slots, i)
	if len(t.termsOf(pod).anti) > 0 {
		t.antiSlots++
	}
	return i
}

// unreserve gives back the last reservation, i.
func (t *targetIndex) unreserve(i int) {
	if i != len(t.slots)-1 {
		panic("rescue: unreserve of a slot that is not the last")
	}
	r := t.rooms[t.slots[i].node]
	r.slots = r.slots[:len(r.slots)-1]
	if len(t.termsOf(t.slots[i].pod).anti) > 0 {
		t.antiSlots--
	}
	t.slots = t.slots[:i]
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
// as the scheduler counts it. The one rule for targetIndex.build and for a
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

// findOptions are what differs between the checks of one pass.
type findOptions struct {
	// self is a pod that is gone once the action is taken (a force
	// delete): its own replacement does not count it.
	self *corev1.Pod
	// ignoreOwner: reservations of this owner do not count (a scale
	// bounce deletes that ReplicaSet's pods, Pending ones too).
	ignoreOwner types.UID
}

// findTarget returns the first Ready node (by name) that admits a
// replacement of pod, or every node's rejection.
func (t *targetIndex) findTarget(pod *corev1.Pod, o findOptions) (string, []rejection) {
	c := t.newCheck(pod, o)
	var rejected []rejection
	for _, n := range t.ready {
		why := c.admits(t.rooms[n.Name])
		if why == "" {
			return n.Name, nil
		}
		rejected = append(rejected, rejection{node: n.Name, why: why})
	}
	return "", rejected
}

// check is one pod's search for a node: what it asks for, computed once.
type check struct {
	t        *targetIndex
	pod      *corev1.Pod
	o        findOptions
	affinity nodeaffinity.RequiredNodeAffinity
	requests corev1.ResourceList
	names    []corev1.ResourceName
	ports    []corev1.ContainerPort
	inter    *interPod
}

func (t *targetIndex) newCheck(pod *corev1.Pod, o findOptions) *check {
	c := &check{t: t, pod: pod, o: o,
		affinity: nodeaffinity.GetRequiredNodeAffinity(pod),
		requests: resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}),
		ports:    HostPorts(pod),
	}
	for name := range c.requests {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	return c
}

// counted reports whether a reservation counts for this check.
func (c *check) counted(s *slot) bool {
	return c.o.ignoreOwner == "" || s.owner != c.o.ignoreOwner
}

// admits returns "" when the node admits the pod, else the first filter
// that refuses it, in words that group well ("cordoned", "insufficient
// cpu"); a refusal that reservations cause names them.
func (c *check) admits(r *room) string {
	n := r.node
	switch t := keepsOffNow(c.pod, n); {
	case t == &unschedulableTaint:
		return "cordoned (spec.unschedulable)"
	case t != nil:
		return fmt.Sprintf("taint %s not tolerated", taintString(t))
	}
	if ok, err := c.affinity.Match(n); err != nil || !ok {
		return "nodeSelector/required node affinity not matched"
	}
	if why := c.portsFree(r); why != "" {
		return why
	}
	if why := c.fits(r); why != "" {
		return why
	}
	return c.interPodOK(r)
}

// portsFree is NodePorts.
func (c *check) portsFree(r *room) string {
	if len(c.ports) == 0 {
		return ""
	}
	if r.partial {
		return "host ports unknown (the snapshot lacks the node's pods)"
	}
	var reserved fw.HostPortInfo
	var reservedBy map[fw.ProtocolPort]string
	for _, i := range r.slots {
		s := &c.t.slots[i]
		if !c.counted(s) || len(s.ports) == 0 {
			continue
		}
		if reserved == nil {
			reserved, reservedBy = fw.HostPortInfo{}, map[fw.ProtocolPort]string{}
		}
		for _, hp := range s.ports {
			reserved.Add(hp.HostIP, string(hp.Protocol), hp.HostPort)
			pp := *fw.NewProtocolPort(string(hp.Protocol), hp.HostPort)
			if _, ok := reservedBy[pp]; !ok {
				reservedBy[pp] = s.who
			}
		}
	}
	for _, hp := range c.ports {
		if r.ports.CheckConflict(hp.HostIP, string(hp.Protocol), hp.HostPort) {
			return fmt.Sprintf("host port %s in use", portString(hp))
		}
		if reserved.CheckConflict(hp.HostIP, string(hp.Protocol), hp.HostPort) {
			return fmt.Sprintf("host port %s reserved for %s", portString(hp), reservedBy[*fw.NewProtocolPort(string(hp.Protocol), hp.HostPort)])
		}
	}
	return ""
}

func portString(p corev1.ContainerPort) string {
	proto := p.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	if p.HostIP != "" {
		return fmt.Sprintf("%s/%s:%d", proto, p.HostIP, p.HostPort)
	}
	return fmt.Sprintf("%s/%d", proto, p.HostPort)
}

// fits is NodeResourcesFit, with this pass's reservations.
func (c *check) fits(r *room) string {
	alloc := r.node.Status.Allocatable
	var who []string
	var slotPods int64
	var slotUsed corev1.ResourceList
	for _, i := range r.slots {
		s := &c.t.slots[i]
		if !c.counted(s) {
			continue
		}
		who = append(who, s.who)
		slotPods++
		if slotUsed == nil {
			slotUsed = corev1.ResourceList{}
		}
		addRequests(slotUsed, s.requests)
	}
	if maxPods, ok := alloc[corev1.ResourcePods]; ok && r.pods+slotPods+1 > maxPods.Value() {
		if r.pods+1 > maxPods.Value() {
			return fmt.Sprintf("too many pods (%d of %s)", r.pods, maxPods.String())
		}
		return fmt.Sprintf("too many pods (%d of %s, and %d reserved for %s)", r.pods, maxPods.String(), slotPods, whoList(who))
	}
	for _, name := range c.names {
		want := c.requests[name]
		if want.IsZero() || name == corev1.ResourcePods {
			continue
		}
		free := alloc[name].DeepCopy()
		free.Sub(r.used[name])
		if want.Cmp(free) > 0 {
			if free.Sign() < 0 {
				free = resource.Quantity{}
			}
			return fmt.Sprintf("insufficient %s (requests %s, free %s)", name, want.String(), free.String())
		}
		held := slotUsed[name]
		if held.IsZero() {
			continue
		}
		left := free.DeepCopy()
		left.Sub(held)
		if want.Cmp(left) > 0 {
			if left.Sign() < 0 {
				left = resource.Quantity{}
			}
			return fmt.Sprintf("insufficient %s (requests %s, free %s, of which %s reserved for %s)",
				name, want.String(), free.String(), held.String(), whoList(who))
		}
	}
	return ""
}

// whoList names the first reservation and counts the others.
func whoList(who []string) string {
	if len(who) == 1 {
		return who[0]
	}
	return fmt.Sprintf("%s (+%d more)", who[0], len(who)-1)
}

// interPod is one pod's InterPodAffinity state: the counts per topology
// pair of the plugin's PreFilter, over the existing pods (base, shared by
// the checks of pods alike) and this pass's reservations (slots).
type interPod struct {
	terms       *podTerms
	base, slots *interCounts
}

// interCounts: existingAnti counts the pods whose required anti-affinity
// matches the incoming pod; affinity and anti the pods that match the
// incoming pod's terms.
type interCounts struct {
	existingAnti, affinity, anti map[topologyPair]pairCount
}

func newInterCounts() *interCounts {
	return &interCounts{existingAnti: map[topologyPair]pairCount{}, affinity: map[topologyPair]pairCount{}, anti: map[topologyPair]pairCount{}}
}

// pairCount counts pods in one topology pair; slot names a reservation
// among them, for the reason.
type pairCount struct {
	n    int
	slot string
}

func addPair(m map[topologyPair]pairCount, labels map[string]string, key, who string) {
	v, ok := labels[key]
	if !ok {
		return
	}
	k := topologyPair{key, v}
	c := m[k]
	c.n++
	if c.slot == "" {
		c.slot = who
	}
	m[k] = c
}

// sum adds the base and the slots' counts of one pair.
func sum(base, slots map[topologyPair]pairCount, k topologyPair) pairCount {
	b, s := base[k], slots[k]
	return pairCount{n: b.n + s.n, slot: s.slot}
}

// interPodState computes the counts, once per check and only when some
// term can refuse the pod. The existing pods' part depends only on the
// pod's namespace, labels and terms (and on a force-deleted pod left out),
// so the replicas of one workload share it: with thousands of pods that
// carry anti-affinity, scanning them for every stranded pod is what would
// cost.
func (c *check) interPodState() *interPod {
	if c.inter != nil {
		return c.inter
	}
	t := c.t
	ip := &interPod{terms: t.termsOf(c.pod), slots: newInterCounts()}
	c.inter = ip
	nsLabels := t.namespaces[c.pod.Namespace]
	pt := ip.terms
	own := pt.err == nil && (len(pt.affinity) > 0 || len(pt.anti) > 0)
	key := c.baseKey()
	if ip.base = t.bases[key]; ip.base == nil {
		ip.base = newInterCounts()
		t.bases[key] = ip.base
		// The existing pods' required anti-affinity against the pod.
		for i := range t.anti {
			e := &t.anti[i]
			if e.pod == c.o.self {
				continue
			}
			for j := range e.terms {
				if e.terms[j].Matches(c.pod, nsLabels) {
					addPair(ip.base.existingAnti, t.nodeLabels[e.node], e.terms[j].TopologyKey, "")
				}
			}
		}
		if own {
			c.countOwnTerms(ip.base)
		}
	}
	for i := range t.slots {
		s := &t.slots[i]
		if !c.counted(s) {
			continue
		}
		st := t.termsOf(s.pod)
		for j := range st.anti {
			if st.anti[j].Matches(c.pod, nsLabels) {
				addPair(ip.slots.existingAnti, t.nodeLabels[s.node], st.anti[j].TopologyKey, s.who)
			}
		}
		if own {
			c.visit(ip.slots, s.pod, s.node, s.who)
		}
	}
	return ip
}

// baseKey names what the existing pods' counts depend on.
func (c *check) baseKey() string {
	var b strings.Builder
	b.WriteString(c.pod.Namespace)
	for _, k := range slices.Sorted(maps.Keys(c.pod.Labels)) {
		b.WriteString("\x00" + k + "=" + c.pod.Labels[k])
	}
	b.WriteString("\x00\x00")
	if c.hasTerms() {
		a := c.pod.Spec.Affinity
		var terms []corev1.PodAffinityTerm
		if a.PodAffinity != nil {
			terms = a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		}
		b.WriteString(fmt.Sprint(len(terms)))
		if a.PodAntiAffinity != nil {
			terms = append(slices.Clip(terms), a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		}
		if j, err := json.Marshal(terms); err == nil {
			b.Write(j)
		} else {
			fmt.Fprintf(&b, "%p", c.pod)
		}
	}
	if c.o.self != nil {
		fmt.Fprintf(&b, "\x00%p", c.o.self)
	}
	return b.String()
}

// countOwnTerms counts the existing pods that match the pod's own terms.
// The scheduler resolves a namespaceSelector to namespace names first;
// matching with each pod's namespace labels is the same.
func (c *check) countOwnTerms(into *interCounts) {
	t, pt := c.t, c.inter.terms
	if !t.placedBuilt {
		t.buildPlaced(t.snap)
	}
	if pt.anyNamespaceSelector {
		for _, pods := range t.placed {
			for _, q := range pods {
				c.visit(into, q.pod, q.node, "")
			}
		}
		return
	}
	seen := map[string]bool{}
	for _, terms := range [][]fw.AffinityTerm{pt.affinity, pt.anti} {
		for j := range terms {
			for ns := range terms[j].Namespaces {
				if seen[ns] {
					continue
				}
				seen[ns] = true
				for _, q := range t.placed[ns] {
					c.visit(into, q.pod, q.node, "")
				}
			}
		}
	}
}

// visit counts one pod q, bound (or reserved) on node, against the pod's
// own terms.
func (c *check) visit(into *interCounts, q *corev1.Pod, node, who string) {
	if q == c.o.self {
		return
	}
	pt := c.inter.terms
	labels := c.t.nodeLabels[node]
	qns := c.t.namespaces[q.Namespace]
	all := len(pt.affinity) > 0
	for j := range pt.affinity {
		if !pt.affinity[j].Matches(q, qns) {
			all = false
			break
		}
	}
	if all {
		for j := range pt.affinity {
			addPair(into.affinity, labels, pt.affinity[j].TopologyKey, who)
		}
	}
	for j := range pt.anti {
		if pt.anti[j].Matches(q, qns) {
			addPair(into.anti, labels, pt.anti[j].TopologyKey, who)
		}
	}
}

// interPodOK is InterPodAffinity's Filter.
func (c *check) interPodOK(r *room) string {
	t := c.t
	if len(t.anti) == 0 && t.antiSlots == 0 && !c.hasTerms() {
		return ""
	}
	ip := c.interPodState()
	labels := r.node.Labels
	if len(ip.base.existingAnti)+len(ip.slots.existingAnti) > 0 {
		for k, v := range labels {
			if pc := sum(ip.base.existingAnti, ip.slots.existingAnti, topologyPair{k, v}); pc.n > 0 {
				return "would break the required pod anti-affinity of " + podsIn(pc, k, v)
			}
		}
	}
	pt := ip.terms
	if pt.err != nil {
		return "required pod (anti-)affinity cannot be parsed: " + pt.err.Error()
	}
	for j := range pt.anti {
		key := pt.anti[j].TopologyKey
		v, ok := labels[key]
		if !ok {
			continue
		}
		if pc := sum(ip.base.anti, ip.slots.anti, topologyPair{key, v}); pc.n > 0 {
			return "required pod anti-affinity not satisfied: " + podsIn(pc, key, v)
		}
		if t.unknown[topologyPair{key, v}] {
			return fmt.Sprintf("required pod anti-affinity unknown: the snapshot lacks the pods of some node in %s=%s", key, v)
		}
	}
	if len(pt.affinity) == 0 {
		return ""
	}
	exist := true
	for j := range pt.affinity {
		key := pt.affinity[j].TopologyKey
		v, ok := labels[key]
		if !ok {
			return fmt.Sprintf("required pod affinity not satisfied: node has no label %s", key)
		}
		if sum(ip.base.affinity, ip.slots.affinity, topologyPair{key, v}).n <= 0 {
			exist = false
		}
	}
	if exist {
		return ""
	}
	// The first pod of a group that matches its own terms may go where
	// no pod matches yet, if none matches anywhere.
	none := len(ip.base.affinity)+len(ip.slots.affinity) == 0
	if none && len(t.unknown) == 0 && matchesAll(pt.affinity, c.pod, t.namespaces[c.pod.Namespace]) {
		return ""
	}
	if len(t.unknown) > 0 {
		return "required pod affinity not satisfied, or unknown: the snapshot lacks the pods of some Ready node"
	}
	return "required pod affinity not satisfied: no matching pod in the node's topology domain"
}

func (c *check) hasTerms() bool {
	a := c.pod.Spec.Affinity
	return a != nil && ((a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) ||
		(a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0))
}

func matchesAll(terms []fw.AffinityTerm, pod *corev1.Pod, nsLabels map[string]string) bool {
	for j := range terms {
		if !terms[j].Matches(pod, nsLabels) {
			return false
		}
	}
	return len(terms) > 0
}

// podsIn says which pods a topology pair holds, naming a reservation
// among them.
func podsIn(pc pairCount, key, value string) string {
	if pc.slot != "" {
		return fmt.Sprintf("%d pod(s) in %s=%s, among them %s", pc.n, key, value, pc.slot)
	}
	return fmt.Sprintf("%d pod(s) in %s=%s", pc.n, key, value)
}

func taintString(t *corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// maxReasonGroups bounds the reasons a NoTarget summary lists: with
// reservations named in them, a large cluster could have one per node.
const maxReasonGroups = 8

// downCounts counts the nodes no replacement may go to: NotReady ones,
// those the API has Ready that are dead on both planes, marked or not (a
// replacement sent there would never start), and those the API has Ready
// whose Lease is stale on rebound's clock (their kubelet does not reach
// the API now: the Ready flag has not caught up yet).
func (p *planner) downCounts() (c downCount) {
	for _, n := range p.snap.Nodes {
		switch {
		case n == nil:
		case p.idx.notReady[n.Name] != nil && !p.idx.notReady[n.Name].early:
			c.notReady++
		case p.idx.notReady[n.Name] != nil, unreachable.DeadEarly(n, p.snap.Verdicts[n.Name]):
			c.dead++
		case p.snap.Verdicts[n.Name].LeaseUnconfirmed():
			c.leaseStale++
		}
	}
	return c
}

// downCount is what downCounts counts.
type downCount struct{ notReady, dead, leaseStale int }

// summarizeRejections groups the nodes by reason, a few names each, so
// that the reason stays readable with a thousand nodes. NotReady nodes,
// and Ready ones dead on both planes, are counted, not listed one by one.
func summarizeRejections(rejected []rejection, down downCount) string {
	var groups []string
	byWhy := map[string][]string{}
	for _, r := range rejected {
		if _, ok := byWhy[r.why]; !ok {
			groups = append(groups, r.why)
		}
		byWhy[r.why] = append(byWhy[r.why], r.node)
	}
	slices.Sort(groups)
	parts := make([]string, 0, min(len(groups), maxReasonGroups)+2)
	for i, g := range groups {
		if i == maxReasonGroups {
			rest := 0
			for _, g := range groups[i:] {
				rest += len(byWhy[g])
			}
			parts = append(parts, fmt.Sprintf("%d more reason(s) for %d node(s)", len(groups)-i, rest))
			break
		}
		parts = append(parts, g+": "+nodeList(byWhy[g]))
	}
	if down.notReady > 0 {
		parts = append(parts, fmt.Sprintf("NotReady: %d node(s)", down.notReady))
	}
	if down.dead > 0 {
		parts = append(parts, fmt.Sprintf("Ready in the API but dead on both planes: %d node(s)", down.dead))
	}
	if down.leaseStale > 0 {
		parts = append(parts, fmt.Sprintf("Ready in the API but its Lease stale on rebound's clock, or not yet seen renewing since rebound started: %d node(s)", down.leaseStale))
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

// placeReplacement decides whether the action of candidate c may be
// proposed at all: not in full disruption, and only with a target, which
// it reserves. It returns the reservation, or ok false after setting the
// decision (Held or NoTarget).
func (p *planner) placeReplacement(c *candidate) (slot int, ok bool) {
	cp := &p.critical[c.pod]
	if p.readyNodes == 0 {
		p.report(cp, DecisionHeld, "every node is NotReady (%d of %d): like kube-controller-manager in full disruption, rebound evicts nothing, because the control plane is the likelier side cut off and a replacement could run nowhere; held until a node is Ready again, and then for the node grace period %s",
			p.totalNodes, p.totalNodes, p.grace)
		return 0, false
	}
	if p.disruption.LeaseStall {
		p.report(cp, DecisionHeld, "no node's Lease renews on rebound's clock (%d of %d stale): every kubelet has lost the API, so the control plane or the path to it is the likelier side cut off, whatever the Ready flags say until they catch up; like kube-controller-manager in full disruption, rebound evicts nothing; held until a Lease renews, and then for the node grace period %s",
			p.leases.Stale, p.leases.Known, p.grace)
		// A renewal starts no pass (the Lease plane's events only feed
		// its tracker); the first node Ready again does, and so does this.
		p.wake(p.now.Add(noTargetRecheck))
		return 0, false
	}
	if n := p.idx.notReady[cp.Node]; n != nil && n.alive != "" {
		// The rescue began before a witness saw the node alive (the pod
		// is Terminating): no scale bounce, nor any other action, now.
		p.report(cp, DecisionHeld, "node %s appears alive to a witness that reaches the API (%s): a node seen alive is not stranded, so no %s; planned again every %s and when the verdict changes",
			cp.Node, n.alive, c.act.Kind, evidenceRecheck)
		p.wake(p.now.Add(evidenceRecheck))
		return 0, false
	}
	if !p.sourceGate(c) {
		return 0, false
	}
	t := p.targetIndex()
	if !t.built {
		t.build(p.snap, p.idx.notReady)
	}
	var o findOptions
	switch c.act.Kind {
	case ActionForceDelete:
		o.self = c.obj
	case ActionScaleDown:
		o.ignoreOwner, _ = ownerOf(c.obj)
	}
	node, rejected := t.findTarget(c.obj, o)
	if node == "" {
		p.report(cp, DecisionNoTarget, "no Ready node can run the replacement (%s): rebound does not act, because a deleted pod would only stay Pending; re-checked whenever a node changes, and every %s",
			summarizeRejections(rejected, p.downCounts()), noTargetRecheck)
		// Pods leaving a Ready node free room without any node event.
		p.wake(p.now.Add(noTargetRecheck))
		return 0, false
	}
	if !p.elsewhereGate(c) {
		return 0, false
	}
	reason := c.act.Reason + fmt.Sprintf("; Ready node %s admits the replacement", node)
	c.act.Reason, cp.Reason = reason, reason
	return t.reserve(node, c.obj, "the replacement of "+cp.Key()+" planned in this pass"), true
}
