package rescue

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
	"rebound/pkg/zone"
)

// Snapshot is everything PlanFor reads: the cluster as the controller's
// informers see it at Now. PlanFor never modifies it.
type Snapshot struct {
	// Now is the time of the snapshot. PlanFor never reads the clock, so a
	// test (or `rebound diagnose --at`) can replay any moment.
	Now time.Time
	// Nodes are all the cluster's nodes: the zone model needs the Ready
	// ones too.
	Nodes []*corev1.Node
	// Pods are all pods. Only pods bound to NotReady nodes are examined.
	Pods []*corev1.Pod
	// Namespaces maps a namespace name to its labels, for namespace
	// selectors. A namespace missing here has no labels.
	Namespaces map[string]map[string]string
	// ReplicaSets and Deployments resolve the owner chain of stateless pods
	// and say whether a replacement is available.
	ReplicaSets []*appsv1.ReplicaSet
	Deployments []*appsv1.Deployment
	// PVCs say whether a pod's volume is exclusive (ReadWriteOnce or
	// ReadWriteOncePod), which makes the pod stateful.
	PVCs []*corev1.PersistentVolumeClaim
	// Policies are all RecoveryPolicies, with their status: the rate limit
	// is counted from status.lastActions so that it survives a restart.
	Policies []*v1alpha1.RecoveryPolicy
	// ZoneConfig is kube-controller-manager's node lifecycle flags as rebound
	// knows them. The zero value stands for kube-controller-manager's
	// defaults (zone.Config.WithDefaults), because a zero config would mean "no
	// eviction ever" and silently change every ETA.
	ZoneConfig zone.Config
	// PreviousZones is the Zones of the previous plan, if any. Upstream only
	// changes a zone's rate when the zone changes state (zone.Advance), so
	// carrying the previous result over makes the ETAs closer to what
	// kube-controller-manager does. The zero value evaluates from scratch.
	PreviousZones zone.Cluster
	// PreviousDisruption is the Disruption of the previous plan, if any:
	// when a full disruption (no Ready node) ends, every NotReady node's
	// maxUnavailableTime clock restarts then, as kube-controller-manager
	// resets its nodes' transition timestamps when it leaves full
	// disruption. Without it, the first node back (the partition heals
	// node by node) would make every pod of the nodes not back yet look
	// stranded for long, and rebound would delete them all a second
	// before their nodes return.
	PreviousDisruption Disruption
	// Defaults are rebound's own knobs; zero fields take their default.
	Defaults Defaults
	// Verdicts are pkg/liveness's verdicts, by node name: the one model of
	// life and death. A NotReady node's maxUnavailableTime clock never
	// starts before its verdict's Since (rebound's own first sight of the
	// NotReady state). A CutOffFromAPI node (a witness that reaches the
	// API sees it alive) is not stranded: no pod of it moves, a stateful
	// one not even when fenced (the signals disagree, and two copies are
	// worse than a stall).
	// nil, or a node missing: the API's transition alone, as upstream.
	Verdicts map[string]liveness.NodeVerdict
	// LeaseRenewTimes is each node's Lease spec.renewTime as read before
	// the verdicts were computed: written by the kubelet's clock, so only
	// ever compared, never used as a time. An action a two-plane verdict
	// decides carries it (TwoPlaneCheck), and the executor refuses that
	// action if the Lease it re-reads says otherwise. A node missing here
	// gets no two-plane action.
	LeaseRenewTimes map[string]time.Time
	// RecentActions is the caller's in-memory ledger of the real actions
	// it took within the last minute (the controller's; nil for a
	// one-shot CLI). The rate limit counts the union of these and
	// status.lastActions, so that a status not yet back in a stale cache
	// cannot let a pass exceed maxActionsPerMinute; status stays the
	// record across restarts.
	RecentActions []LedgerEntry
	// Usage, when set, is what the pods bound to each node request
	// (NodeUsage, counted with PodUsage); a controller keeps it up to
	// date from its pod events, so that a plan that looks for a target
	// reads a thousand sums instead of summing every pod of every Ready
	// node. Pods must still hold the Ready nodes' pods for host ports and
	// inter-pod affinity, and the Pending pods (target.go); a Ready node
	// with fewer of its pods in Pods than Usage counts takes no pod with
	// host ports or inter-pod terms. Nil: the planner sums Pods itself.
	Usage map[string]NodeUsage
	// LedgerSince is when the caller's ledger began (the controller's
	// first pass as leader); zero for none. Once a minute has passed
	// since, the ledger holds every real action of the last minute (only
	// the leader acts), so the 10-record cap of status.lastActions no
	// longer caps maxActionsPerMinute: the ledger's count is exact.
	LedgerSince time.Time
}

// Disruption is the full-disruption state a plan carries to the next one.
type Disruption struct {
	// Active: no node was Ready, or no node's Lease renewed on rebound's
	// clock (LeaseStall).
	Active bool
	// LeaseStall: every Lease rebound knows was stale (the Lease plane
	// sees a stall before the Ready flags catch up).
	LeaseStall bool
	// StartedAt is when the last stall began (the first plan that saw it):
	// its end restarts the clocks of the nodes that went NotReady in it.
	StartedAt time.Time
	// EndedAt is when the last full disruption ended (the first plan
	// that saw a Ready node again); zero if none was seen.
	EndedAt time.Time
}

// LedgerEntry is one real action in Snapshot.RecentActions. It matches its
// status.lastActions record by policy, time (to the second, as the API
// stores it), action and pod, so that an action in both counts once.
type LedgerEntry struct {
	Policy string
	Record v1alpha1.ActionRecord
}

// Defaults are rebound's settings that no RecoveryPolicy carries.
type Defaults struct {
	// ReplacementTimeout is how long a deleted (terminating) stateless pod
	// may wait for its Deployment to be fully available again before
	// rebound falls back to a scale bounce. Zero means
	// DefaultReplacementTimeout.
	ReplacementTimeout time.Duration
}

// DefaultReplacementTimeout is Defaults.ReplacementTimeout when unset.
const DefaultReplacementTimeout = 60 * time.Second

// WithDefaults returns d with every zero field replaced by its default:
// the one place the controller, restore and diagnose default them.
func (d Defaults) WithDefaults() Defaults {
	if d.ReplacementTimeout <= 0 {
		d.ReplacementTimeout = DefaultReplacementTimeout
	}
	return d
}

// objKey names a namespaced object without building a "ns/name" string, so
// that map lookups in the hot loop do not allocate.
type objKey struct{ namespace, name string }

// nodeState is what the planner knows about one NotReady node.
type nodeState struct {
	node *corev1.Node
	// zone is the zone key (zone.ZoneKeyFromLabels).
	zone string
	// readyStatus is the Ready condition's status: False, Unknown, or ""
	// when the node has no Ready condition. It picks the taint upstream
	// will add: not-ready for False, unreachable otherwise.
	readyStatus corev1.ConditionStatus
	// since is when the node stopped being Ready: the Ready condition's
	// lastTransitionTime, or the node's creation time without one.
	since time.Time
	// evictionTaints are the node's NoExecute taints
	// node.kubernetes.io/unreachable and node.kubernetes.io/not-ready.
	evictionTaints []*corev1.Taint
	// fenced is true when the node carries node.kubernetes.io/out-of-service
	// with effect NoExecute (IsFencingTaint): someone confirmed the node is
	// off.
	fenced bool
	// observed is when rebound first saw the node NotReady (the verdict's
	// Since); zero without a verdict.
	observed time.Time
	// alive is the CutOffFromAPI verdict's evidence that the node still
	// runs (liveness.NodeVerdict.FirstHandLife); "" otherwise.
	alive string
	// ahead counts the untainted NotReady nodes of the same zone that
	// upstream's taint queue serves before this one (see queuePositions).
	ahead int
	// twoPlane is set when the node is dead on both planes and carries
	// rebound's taint rebound.dev/unreachable (pkg/unreachable): for the
	// policies with detection TwoPlanes its clock starts at the
	// detection. early: the API still has it Ready, and only those
	// policies examine its pods.
	twoPlane *TwoPlaneCheck
	early    bool
	// leaseStaleAt is when its Lease went, or goes, stale on rebound's
	// clock (liveness.NodeVerdict.LeaseStaleAt), leaseRenewSeen its last
	// renewal seen; zero without a Lease plane.
	leaseStaleAt, leaseRenewSeen time.Time
	// incident is when the node's trouble began, the key of the one scale
	// bounce per incident: the NotReady transition, or the time rebound
	// marked it unreachable when that was earlier (the same incident:
	// pkg/unreachable keeps the mark until the node is Ready again).
	incident time.Time
}

// snapshotIndex holds the maps PlanFor builds once so that every lookup in
// the pod loop is O(1): the benchmark has 150,000 pods.
type snapshotIndex struct {
	// notReady holds the nodes whose pods are examined: the NotReady
	// ones, and those the API has Ready that are dead on both planes and
	// marked unreachable (nodeState.early). Neither is a target.
	notReady    map[string]*nodeState
	replicaSets map[objKey]*appsv1.ReplicaSet
	deployments map[objKey]*appsv1.Deployment
	pvcs        map[objKey]*corev1.PersistentVolumeClaim
}

// indexNodes returns the zone model's view of every node (as upstream
// sees them: by the Ready condition alone), the state of each node whose
// pods the planner examines, keyed by name (the NotReady nodes, and the
// Ready ones dead on both planes and marked unreachable), and how many
// nodes the API has Ready.
func indexNodes(nodes []*corev1.Node, verdicts map[string]liveness.NodeVerdict, leases map[string]time.Time) ([]zone.NodeInfo, map[string]*nodeState, int) {
	infos := make([]zone.NodeInfo, 0, len(nodes))
	notReady := make(map[string]*nodeState)
	readyNodes := 0
	for _, n := range nodes {
		if n == nil {
			continue
		}
		ready, status, since := readyCondition(n)
		info := zone.NodeFromLabels(n.Name, n.Labels, ready)
		infos = append(infos, info)
		twoPlane := twoPlaneCheck(n, verdicts[n.Name], leases)
		var ns *nodeState
		switch {
		case ready && twoPlane != nil && verdicts[n.Name].Early:
			// Only the TwoPlanes policies examine its pods; for upstream,
			// and for the zone model, it is Ready.
			readyNodes++
			ns = &nodeState{node: n, zone: info.Zone, readyStatus: status, twoPlane: twoPlane, early: true, incident: twoPlane.MarkedAt}
		case ready:
			readyNodes++
			continue
		default:
			ns = &nodeState{node: n, zone: info.Zone, readyStatus: status, since: since, twoPlane: twoPlane, incident: since}
			// The mark dates the incident whatever the verdict says now
			// (a restarted controller's, or one that left Dead):
			// pkg/unreachable keeps it while the node is NotReady.
			if mark := unreachable.Tainted(n); mark != nil && mark.TimeAdded != nil && mark.TimeAdded.Time.Before(since) {
				ns.incident = mark.TimeAdded.Time
			}
			if v, ok := verdicts[n.Name]; ok && v.Verdict != liveness.Alive {
				ns.observed = v.Since
				if why, alive := v.FirstHandLife(); alive {
					ns.alive = why
				}
			}
			if v, ok := verdicts[n.Name]; ok {
				ns.leaseStaleAt, ns.leaseRenewSeen = v.LeaseStaleAt, v.LeaseRenewSeen
			}
		}
		ns.fenced = Fenced(n)
		for i := range n.Spec.Taints {
			t := &n.Spec.Taints[i]
			switch {
			case IsFencingTaint(t):
			case t.Effect == corev1.TaintEffectNoExecute &&
				(t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady):
				ns.evictionTaints = append(ns.evictionTaints, t)
			}
		}
		notReady[n.Name] = ns
	}
	queuePositions(notReady)
	return infos, notReady, readyNodes
}

// TwoPlaneCheck is what an action decided by a two-plane verdict carries
// for the executor, which re-checks it instead of refusing because the
// node is Ready: the node's Lease must still name LeaseRenewTime (a
// renewal since means the kubelet lives), the node must still carry
// rebound's taint, and the verdict it asks for now must still be Dead on
// both planes.
type TwoPlaneCheck struct {
	// LeaseRenewTime is the Lease's spec.renewTime the verdict rests on,
	// as the kubelet wrote it: compared, never used as a time.
	LeaseRenewTime time.Time
	// DetectedAt is when the Lease went stale on rebound's clock (the
	// verdict's DetectedAt): the start of the TwoPlanes clock.
	DetectedAt time.Time
	// MarkedAt is the timeAdded of rebound's taint on the node.
	MarkedAt time.Time
}

// twoPlaneCheck is the node's TwoPlaneCheck, or nil when its pods are not
// judged on two planes: it must be Dead with a detection time, carry
// rebound's taint (the budgeted record of the verdict, pkg/unreachable),
// and have a Lease renewTime to compare.
func twoPlaneCheck(n *corev1.Node, v liveness.NodeVerdict, leases map[string]time.Time) *TwoPlaneCheck {
	renew, ok := leases[n.Name]
	taint := unreachable.Tainted(n)
	if v.Verdict != liveness.Dead || v.DetectedAt.IsZero() || taint == nil || taint.TimeAdded == nil || !ok || renew.IsZero() {
		return nil
	}
	return &TwoPlaneCheck{LeaseRenewTime: renew, DetectedAt: v.DetectedAt, MarkedAt: taint.TimeAdded.Time}
}

// IsFencingTaint reports whether a taint fences its node: the non-graceful
// node shutdown taint node.kubernetes.io/out-of-service with effect
// NoExecute, the only form upstream acts on (pod GC force-deletes pods of
// such nodes). Any other effect is not an operator's assertion that the
// node is off. The executor applies the same test to the node it re-reads
// from the API before a force delete.
func IsFencingTaint(t *corev1.Taint) bool {
	return t.Key == corev1.TaintNodeOutOfService && t.Effect == corev1.TaintEffectNoExecute
}

// Fenced reports whether a node is fenced: it carries the fencing taint,
// and if rebound put it there (fencing.AnnotationFencedBoot), rebound's
// re-read after the taint found nothing changed
// (fencing.AnnotationVerified) and the node still runs the boot that was
// fenced. A person's taint is proof at once; a rebound taint not verified
// yet is not, nor one of an earlier boot: a node back on a new boot runs
// every pod that tolerates the taint, and nothing has proven that boot
// stopped.
func Fenced(n *corev1.Node) bool {
	tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return IsFencingTaint(&t) })
	if !tainted {
		return false
	}
	boot, ours := n.Annotations[fencing.AnnotationFencedBoot]
	if !ours {
		return true
	}
	_, verified := n.Annotations[fencing.AnnotationVerified]
	return verified && boot == n.Status.NodeInfo.BootID
}

// readyCondition reads a node's Ready condition. A node is NotReady when
// its Ready condition is not True, including when it has none.
func readyCondition(n *corev1.Node) (ready bool, status corev1.ConditionStatus, since time.Time) {
	c := kubestatus.NodeReadyCondition(n)
	if c == nil {
		return false, "", n.CreationTimestamp.Time
	}
	since = c.LastTransitionTime.Time
	if since.IsZero() {
		since = n.CreationTimestamp.Time
	}
	return c.Status == corev1.ConditionTrue, c.Status, since
}

// queuePositions sets nodeState.ahead. Upstream keeps one taint queue per
// zone, ordered by when the controller first saw each node NotReady; a node
// already tainted has had its turn. The model orders the untainted NotReady
// nodes of each zone by NotReady time, then name (for determinism).
func queuePositions(notReady map[string]*nodeState) {
	byZone := make(map[string][]*nodeState)
	for _, ns := range notReady {
		// A node the API has Ready is in no upstream queue.
		if len(ns.evictionTaints) == 0 && !ns.early {
			byZone[ns.zone] = append(byZone[ns.zone], ns)
		}
	}
	for _, queue := range byZone {
		slices.SortFunc(queue, func(a, b *nodeState) int {
			return cmp.Or(a.since.Compare(b.since), strings.Compare(a.node.Name, b.node.Name))
		})
		for i, ns := range queue {
			ns.ahead = i
		}
	}
}

// examined is a pod on a NotReady node that a policy makes critical.
type examined struct {
	pod  *corev1.Pod
	node *nodeState
	rule *policyRule
	// note says how the policy was chosen when several select the pod.
	note string
}

// indexOwners builds the owner and volume maps, keeping only the objects the
// examined pods refer to. Looking up a few hundred keys while scanning the
// lists costs far less than hashing every ReplicaSet of the cluster (with
// revisionHistoryLimit there are several per Deployment) into a map.
func indexOwners(s *Snapshot, pods []examined) snapshotIndex {
	wantRS := make(map[objKey]struct{})
	wantPVC := make(map[objKey]struct{})
	for _, e := range pods {
		if ref := metav1.GetControllerOfNoCopy(e.pod); ref != nil && ref.Kind == "ReplicaSet" {
			wantRS[objKey{e.pod.Namespace, ref.Name}] = struct{}{}
		}
		for i := range e.pod.Spec.Volumes {
			if claim := claimName(e.pod, &e.pod.Spec.Volumes[i]); claim != "" {
				wantPVC[objKey{e.pod.Namespace, claim}] = struct{}{}
			}
		}
	}

	idx := snapshotIndex{
		replicaSets: make(map[objKey]*appsv1.ReplicaSet, len(wantRS)),
		deployments: make(map[objKey]*appsv1.Deployment),
		pvcs:        make(map[objKey]*corev1.PersistentVolumeClaim, len(wantPVC)),
	}
	wantDeployment := make(map[objKey]struct{})
	for _, rs := range s.ReplicaSets {
		if rs == nil {
			continue
		}
		k := objKey{rs.Namespace, rs.Name}
		if _, ok := wantRS[k]; !ok {
			continue
		}
		idx.replicaSets[k] = rs
		if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.Kind == "Deployment" {
			wantDeployment[objKey{rs.Namespace, ref.Name}] = struct{}{}
		}
	}
	for _, d := range s.Deployments {
		if d == nil {
			continue
		}
		if k := (objKey{d.Namespace, d.Name}); hasKey(wantDeployment, k) {
			idx.deployments[k] = d
		}
	}
	for _, pvc := range s.PVCs {
		if pvc == nil {
			continue
		}
		if k := (objKey{pvc.Namespace, pvc.Name}); hasKey(wantPVC, k) {
			idx.pvcs[k] = pvc
		}
	}
	return idx
}

func hasKey(m map[objKey]struct{}, k objKey) bool {
	_, ok := m[k]
	return ok
}

// claimName is the PVC a volume uses: its claimName, or for a generic
// ephemeral volume the claim the ephemeral volume controller creates,
// <pod>-<volume>. "" for other volumes.
func claimName(pod *corev1.Pod, v *corev1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.Ephemeral != nil:
		return pod.Name + "-" + v.Name
	default:
		return ""
	}
}

// replicaSetFor returns the ReplicaSet a controller reference points to, or
// nil when the snapshot has no object of that name and UID (deleted, or
// recreated under the same name).
func (idx *snapshotIndex) replicaSetFor(namespace string, ref *metav1.OwnerReference) *appsv1.ReplicaSet {
	rs := idx.replicaSets[objKey{namespace, ref.Name}]
	if rs == nil || (ref.UID != "" && rs.UID != ref.UID) {
		return nil
	}
	return rs
}

// deploymentFor is replicaSetFor for Deployments.
func (idx *snapshotIndex) deploymentFor(namespace string, ref *metav1.OwnerReference) *appsv1.Deployment {
	d := idx.deployments[objKey{namespace, ref.Name}]
	if d == nil || (ref.UID != "" && d.UID != ref.UID) {
		return nil
	}
	return d
}

// desiredReplicas reads spec.replicas, which the API server defaults to 1.
func desiredReplicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// policyRule is a RecoveryPolicy prepared once per plan: defaulted,
// validated and its selector compiled with api/v1alpha1's own helpers, so
// that the planner and `rebound policy validate` agree on what is valid. An
// invalid policy keeps err and selects no pod: a policy that cannot be read
// must fail closed, never match all.
type policyRule struct {
	name   string
	policy *v1alpha1.RecoveryPolicy
	err    error

	suspended      bool
	dryRun         bool
	maxUnavailable time.Duration
	allowDelete    bool
	allowBounce    bool
	fencing        v1alpha1.FencingMode
	twoPlanes      bool
	maxPerMinute   int
	maxConcurrent  int
	selector       *v1alpha1.CompiledCriticalSelector

	// report accumulates this plan's counts for the policy.
	report PolicyReport
}

// compilePolicies compiles every policy, sorted by name so that "the first
// matching policy" is the same on every run.
func compilePolicies(policies []*v1alpha1.RecoveryPolicy) []*policyRule {
	rules := make([]*policyRule, 0, len(policies))
	for _, p := range policies {
		if p != nil {
			rules = append(rules, compilePolicy(p))
		}
	}
	slices.SortFunc(rules, func(a, b *policyRule) int { return strings.Compare(a.name, b.name) })
	return rules
}

// compilePolicy applies the API's defaults to a copy of the spec (a policy
// built in Go, in a test or a CLI, was never defaulted by an API server) and
// validates the policy as the API server would, every error naming its
// field.
func compilePolicy(p *v1alpha1.RecoveryPolicy) *policyRule {
	spec := p.Spec.DeepCopy()
	spec.Default()
	r := &policyRule{
		name:           p.Name,
		policy:         p,
		suspended:      spec.Suspend,
		dryRun:         spec.DryRun,
		maxUnavailable: spec.EffectiveMaxUnavailableTime(),
		allowDelete:    slices.Contains(spec.Actions, v1alpha1.DeleteAndReplace),
		allowBounce:    slices.Contains(spec.Actions, v1alpha1.ScaleBounce),
		fencing:        spec.Fencing.Mode,
		twoPlanes:      spec.Detection == v1alpha1.DetectionTwoPlanes,
		maxPerMinute:   int(spec.Limits.MaxActionsPerMinute),
		maxConcurrent:  int(spec.Limits.MaxConcurrent),
	}
	if errs := p.Validate(); len(errs) > 0 {
		r.err = errs.ToAggregate()
		return r
	}
	r.selector, r.err = spec.Critical.Compile()
	return r
}

// selects reports whether the policy makes the pod critical: every selector
// that is set must match. Invalid policies select nothing.
func (r *policyRule) selects(pod *corev1.Pod, namespaces map[string]map[string]string) bool {
	return r.err == nil && r.selector.Matches(pod, namespaces[pod.Namespace])
}

// choosePolicy returns the policy that governs a pod, or nil when no valid
// policy selects it. Active policies win over suspended ones; among equals
// the first by name wins, and note says so when there was a choice.
func choosePolicy(rules []*policyRule, pod *corev1.Pod, namespaces map[string]map[string]string) (chosen *policyRule, note string) {
	var matched []string
	var firstSuspended *policyRule
	for _, r := range rules {
		if !r.selects(pod, namespaces) {
			continue
		}
		matched = append(matched, r.name)
		switch {
		case !r.suspended && (chosen == nil || chosen.suspended):
			chosen = r
		case r.suspended && firstSuspended == nil:
			firstSuspended = r
		}
	}
	if chosen == nil {
		chosen = firstSuspended
	}
	if len(matched) > 1 {
		note = fmt.Sprintf("selected by policies %s; %s applies (active before suspended, then first by name)",
			strings.Join(matched, ", "), chosen.name)
	}
	return chosen, note
}
