package unreachable

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
)

// Defaults of the budget (Options).
const (
	// DefaultMaxShare: no node is marked while it would leave more than
	// half of the nodes out at once, NotReady in the API and marked
	// counted together (each node once). More nodes down at the same
	// moment is what a broken control plane, Lease writes that stall, or
	// a gossip network split looks like, far likelier than that many
	// deaths; marking them would be worse than upstream, which waits (and
	// itself stops evicting at 55 % unhealthy).
	DefaultMaxShare = 0.5
	// DefaultMarksPerMinuteShare: new marks within any minute, as a share
	// of the nodes (at least DefaultMinMarksPerMinute), so that nodes
	// dying one a second are marked at a bounded pace while the budget
	// above can still hold the lot if they turn out to be many.
	DefaultMarksPerMinuteShare = 0.1
	// DefaultMinMarksPerMinute is the floor of the rate: two nodes lost
	// together (a rack's pair) are both marked at once.
	DefaultMinMarksPerMinute = 2
)

// rateWindow is the window of the rate limit.
const rateWindow = time.Minute

// Options tune the plan. The zero value means the defaults and no pod
// marking.
type Options struct {
	// MarkPodsNotReady: also set the Ready condition of a marked node's
	// pods False (the controller's --mark-pods-not-ready-early).
	MarkPodsNotReady bool
	// MaxShare is the share of the nodes that may be out at once (NotReady
	// in the API or carrying rebound's taint) for a new mark to be made,
	// 0 < MaxShare <= 1; zero means DefaultMaxShare.
	MaxShare float64
	// MarksPerMinute caps the taints added within any minute; zero means
	// DefaultMarksPerMinuteShare of the nodes, at least
	// DefaultMinMarksPerMinute.
	MarksPerMinute int
}

// Validate names a field out of range.
func (o Options) Validate() error {
	if o.MaxShare < 0 || o.MaxShare > 1 || math.IsNaN(o.MaxShare) {
		return fmt.Errorf("unreachable: MaxShare is %v, must be 0 (the default, %v) or in (0, 1]", o.MaxShare, DefaultMaxShare)
	}
	if o.MarksPerMinute < 0 {
		return fmt.Errorf("unreachable: MarksPerMinute is %d, must be 0 (the default) or positive", o.MarksPerMinute)
	}
	return nil
}

// Mark is one taint this process added: the caller's ledger.
type Mark struct {
	Node string
	At   time.Time
}

// Snapshot is what Plan reads.
type Snapshot struct {
	Now   time.Time
	Nodes []*corev1.Node
	// Pods are the pods bound to the nodes dead on both planes; others are
	// ignored. Marking reads their Ready condition, so they must come
	// with it (the controller lists them from the API).
	Pods []*corev1.Pod
	// Verdicts are pkg/liveness's, by node. nil, or a node missing, is no
	// verdict: rebound's taint comes off, and none goes on.
	Verdicts map[string]liveness.NodeVerdict
	// Recent is the caller's ledger of the taints it added within the
	// last minute; the rate limit counts them besides the taints' own
	// timeAdded, so that a taint added and removed again still counts.
	Recent  []Mark
	Options Options
}

// ActionKind is one change Plan asks for.
type ActionKind string

const (
	// AddTaint adds rebound's taint (NoSchedule, timeAdded Now).
	AddTaint ActionKind = "AddTaint"
	// RemoveTaint removes rebound's taint, and no other.
	RemoveTaint ActionKind = "RemoveTaint"
	// MarkPodNotReady sets a pod's Ready condition False
	// (NotReadyCondition) through its status subresource.
	MarkPodNotReady ActionKind = "MarkPodNotReady"
)

// Action is one change. Node changes carry the node's UID: a node
// recreated under the same name is not changed. Pod changes carry the
// pod's UID and resourceVersion, preconditions of the write.
type Action struct {
	Kind    ActionKind
	Node    string
	NodeUID types.UID
	// Namespace, Pod, PodUID and ResourceVersion name the pod of a
	// MarkPodNotReady.
	Namespace, Pod  string
	PodUID          types.UID
	ResourceVersion string
	// Reason says which rule decided, fit for an Event and a log line.
	Reason string
}

// Key identifies the action.
func (a Action) Key() string {
	if a.Kind == MarkPodNotReady {
		return string(a.Kind) + " " + a.Namespace + "/" + a.Pod
	}
	return string(a.Kind) + " " + a.Node
}

// HoldKind says which budget holds a node unmarked.
type HoldKind string

const (
	// HeldBudget: more nodes would be out at once (NotReady or marked)
	// than MaxShare allows.
	HeldBudget HoldKind = "Budget"
	// HeldRateLimited: MarksPerMinute taints were added within the last
	// minute.
	HeldRateLimited HoldKind = "RateLimited"
)

// Hold is a node dead on both planes that is not marked, and why.
type Hold struct {
	Node   string
	Kind   HoldKind
	Reason string
}

// Plan is what to do now.
type Plan struct {
	// Actions in order: per node (by name) the taint change first, then
	// its pods (by namespace and name). A MarkPodNotReady counts on its
	// node's taint: the caller applies it only once the taint is there.
	Actions []Action
	Held    []Hold
	// Unreachable counts the nodes that carry rebound's taint once the
	// plan is applied; Out the nodes NotReady in the API or carrying the
	// taint (each once), which the budget counts; MaxUnreachable is the
	// budget's cap on Out for a new mark.
	Unreachable, Out, MaxUnreachable int
	// MarksLastMinute counts the marks of the last minute before this
	// plan's; MarksPerMinute is the rate's cap.
	MarksLastMinute, MarksPerMinute int
	// NextCheck is when a held mark may be allowed with no new input (a
	// mark ages out of the rate window); zero when only new input can
	// change the plan. Verdicts change on their own too: the caller also
	// looks again at liveness.Assessment.StaleAt.
	NextCheck time.Time
}

// PlanFor decides, from a snapshot, which nodes carry rebound's taint and
// which pods are marked not ready. Equal snapshots give equal plans.
func PlanFor(s Snapshot) Plan {
	nodes := slices.Clone(s.Nodes)
	nodes = slices.DeleteFunc(nodes, func(n *corev1.Node) bool { return n == nil })
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })

	p := Plan{MaxUnreachable: maxUnreachable(len(nodes), s.Options.MaxShare), MarksPerMinute: marksPerMinute(len(nodes), s.Options.MarksPerMinute)}
	recent := recentMarks(s, nodes)
	p.MarksLastMinute = len(recent)

	var candidates []*corev1.Node
	keep := map[string]bool{} // nodes that carry the taint after the plan
	notReady := 0             // nodes the API has NotReady
	for _, n := range nodes {
		taint := Tainted(n)
		v, known := s.Verdicts[n.Name]
		// Dead as the rule table reads it: evidence of life comes first,
		// whatever the verdict's name.
		rule, _ := v.Rule()
		dead := known && (rule.Name == liveness.RuleDeadEarly || rule.Name == liveness.RuleDead)
		ready := kubestatus.NodeReady(n)
		if !ready {
			notReady++
		}
		switch {
		case taint != nil && !ready:
			// The mark is the record of when the incident began (the
			// scale bounce's key in pkg/rescue), whatever the verdict says
			// now: a restarted controller has none for a while, and takes
			// its first sight of every Lease for a renewal. Upstream's own
			// not-ready/unreachable NoSchedule taint keeps new pods off a
			// NotReady node, so keeping it changes nothing about
			// scheduling; it comes off when the node is Ready again.
			keep[n.Name] = true
		case taint != nil && !dead:
			p.Actions = append(p.Actions, Action{Kind: RemoveTaint, Node: n.Name, NodeUID: n.UID, Reason: removeReason(v, known)})
		case taint != nil:
			keep[n.Name] = true
		case DeadEarly(n, v):
			candidates = append(candidates, n)
		}
	}
	// A node counts once, NotReady or marked: marks are only kept, never
	// added, on NotReady nodes.
	markedReady := 0
	for _, n := range nodes {
		if keep[n.Name] && kubestatus.NodeReady(n) {
			markedReady++
		}
	}
	out := notReady + markedReady

	switch {
	case len(candidates) == 0:
	case out+len(candidates) > p.MaxUnreachable:
		why := fmt.Sprintf("%d node(s) would be out at once (%d NotReady in the API, %d more carrying %s, %d newly dead on both planes), more than %d, %s of the %d nodes: so many deaths at the same moment are likelier a global fault (the control plane, the Lease writes, the gossip network) than deaths; none is marked, upstream's timing applies",
			out+len(candidates), notReady, markedReady, TaintKey, len(candidates), p.MaxUnreachable, shareWords(s.Options.MaxShare), len(nodes))
		for _, n := range candidates {
			p.Held = append(p.Held, Hold{Node: n.Name, Kind: HeldBudget, Reason: deadReason(s.Verdicts[n.Name]) + "; but " + why})
		}
	default:
		for _, n := range candidates {
			v := s.Verdicts[n.Name]
			if len(recent) >= p.MarksPerMinute {
				free := oldest(recent).Add(rateWindow)
				p.Held = append(p.Held, Hold{Node: n.Name, Kind: HeldRateLimited, Reason: fmt.Sprintf("%s; but %d node(s) were marked within the last minute, the most allowed (%d a minute): marked at %s at the earliest, if still dead",
					deadReason(v), len(recent), p.MarksPerMinute, free.UTC().Format(time.RFC3339))})
				if p.NextCheck.IsZero() || free.Before(p.NextCheck) {
					p.NextCheck = free
				}
				continue
			}
			recent = append(recent, s.Now)
			keep[n.Name] = true
			out++
			p.Actions = append(p.Actions, Action{Kind: AddTaint, Node: n.Name, NodeUID: n.UID,
				Reason: fmt.Sprintf("%s; tainted %s:NoSchedule so that nothing new is scheduled there (%d of at most %d nodes out, NotReady or marked; %d of %d marks this minute)",
					deadReason(v), TaintKey, out, p.MaxUnreachable, len(recent), p.MarksPerMinute)})
		}
	}
	p.Unreachable, p.Out = len(keep), out

	if s.Options.MarkPodsNotReady {
		p.Actions = append(p.Actions, marks(s, nodes, keep)...)
	}
	slices.SortStableFunc(p.Actions, func(a, b Action) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(order(a.Kind), order(b.Kind)),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod))
	})
	return p
}

// marks lists the pods to mark not ready: those of the nodes that carry
// the taint after the plan, while the API still has them Ready (once it
// has them NotReady, kube-controller-manager marks them itself).
func marks(s Snapshot, nodes []*corev1.Node, keep map[string]bool) []Action {
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var out []Action
	for _, pod := range s.Pods {
		if pod == nil {
			continue
		}
		n := byName[pod.Spec.NodeName]
		if n == nil || !keep[n.Name] || !DeadEarly(n, s.Verdicts[n.Name]) || !NeedsMark(pod, n.Name) {
			continue
		}
		out = append(out, Action{Kind: MarkPodNotReady, Node: n.Name, NodeUID: n.UID, Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Reason: fmt.Sprintf("node %s is dead on both planes though the API still has it Ready (%s): Ready condition set False, as kube-controller-manager does at NotReady, so that EndpointSlices stop sending traffic to it",
				n.Name, s.Verdicts[n.Name].Reason)})
	}
	return out
}

func order(k ActionKind) int {
	if k == MarkPodNotReady {
		return 1
	}
	return 0
}

// recentMarks are the times of the marks within the last minute: the
// taints' own timeAdded (a taint added in the future, by a replica whose
// clock is ahead, counts as just added), and the ledger's marks whose
// taint is gone or was added again since.
func recentMarks(s Snapshot, nodes []*corev1.Node) []time.Time {
	var out []time.Time
	seen := map[Mark]bool{}
	inWindow := func(t time.Time) bool { return t.After(s.Now.Add(-rateWindow)) }
	for _, n := range nodes {
		t := Tainted(n)
		if t == nil || t.TimeAdded == nil {
			continue
		}
		at := t.TimeAdded.Time
		if inWindow(at) {
			out = append(out, at)
			// The API keeps whole seconds: the ledger's mark of the same
			// taint matches once truncated.
			seen[Mark{Node: n.Name, At: at.Truncate(time.Second)}] = true
		}
	}
	for _, m := range s.Recent {
		if inWindow(m.At) && !seen[Mark{Node: m.Node, At: m.At.Truncate(time.Second)}] {
			out = append(out, m.At)
		}
	}
	return out
}

func oldest(ts []time.Time) time.Time {
	return slices.MinFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
}

func maxUnreachable(nodes int, share float64) int {
	if share <= 0 {
		share = DefaultMaxShare
	}
	return int(math.Floor(float64(nodes) * share))
}

func marksPerMinute(nodes, set int) int {
	if set > 0 {
		return set
	}
	return max(DefaultMinMarksPerMinute, int(math.Ceil(float64(nodes)*DefaultMarksPerMinuteShare)))
}

func shareWords(share float64) string {
	if share <= 0 || share == DefaultMaxShare {
		return "half"
	}
	return fmt.Sprintf("%g", share)
}

// deadReason is the verdict in words.
func deadReason(v liveness.NodeVerdict) string {
	return "dead on both planes while the API has it Ready: " + v.Reason
}

// removeReason says why rebound's taint comes off a node the API has
// Ready.
func removeReason(v liveness.NodeVerdict, known bool) string {
	if !known {
		return fmt.Sprintf("no liveness verdict for the node (the controller has none yet, or the node's Lease and reports are not read): %s removed, the fail-open side", TaintKey)
	}
	if why, alive := v.EvidenceOfLife(); alive {
		return fmt.Sprintf("no longer dead (verdict %s; %s): %s removed", v.Verdict, strings.TrimSpace(why), TaintKey)
	}
	if v.Verdict == liveness.Alive {
		return fmt.Sprintf("no longer dead (verdict %s: %s): %s removed", v.Verdict, strings.TrimSpace(v.Reason), TaintKey)
	}
	return fmt.Sprintf("no longer dead on both planes (verdict %s: %s): %s removed, the fail-open side", v.Verdict, strings.TrimSpace(v.Reason), TaintKey)
}
