package diagnose

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/rescue"
)

// fencingEventReasons are the reasons of the fencing reconciler's Events
// about Nodes (internal/controller/fencing_controller.go).
var fencingEventReasons = []string{"FencingTainted", "FencingVerified", "FencingUntainted", "FencingHeld", "FencingFailed"}

// The states of the published fencing document, as diagnose could read it.
const (
	// FencingDocumentPublished: read and valid.
	FencingDocumentPublished = "Published"
	// FencingDocumentNotPublished: no ConfigMap; the controller writes one
	// once an agent reports fencing and it runs with --lease-plane.
	FencingDocumentNotPublished = "NotPublished"
	// FencingDocumentForbidden: diagnose may not read it.
	FencingDocumentForbidden = "Forbidden"
	// FencingDocumentUnreadable: the read failed, or the document is
	// invalid.
	FencingDocumentUnreadable = "Unreadable"
)

// FencingEvent is one of the fencing reconciler's Events about a Node.
type FencingEvent struct {
	Node    string    `json:"-"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

// Fencing is watchdog self-fencing as diagnose sees it (docs/fencing.md).
type Fencing struct {
	// Document is the published document's state (Published,
	// NotPublished, Forbidden, Unreadable); ListNumber and Members its
	// member list, OpenRounds its open rounds, when Published.
	Document   string `json:"document"`
	ListNumber int64  `json:"listNumber,omitempty"`
	Members    int    `json:"members,omitempty"`
	OpenRounds int    `json:"openRounds"`
	// Nodes are every node whose agent reports fencing or that carries
	// node.kubernetes.io/out-of-service, sorted by node.
	Nodes []FencingNode `json:"nodes"`
}

// FencingNode is one node's fencing state.
type FencingNode struct {
	Node string `json:"node"`
	// State sums it up: Armed (could be fenced), NotArmed, EarlierBoot
	// (the report is of an earlier boot), NoList (armed, no member list),
	// NoReport (tainted, no agent report), Tainted (rebound's taint, not
	// verified), Fenced (rebound's taint, verified), TaintedByOther (a
	// person's or another fencing agent's taint).
	State string `json:"state"`
	// Reason says it in one sentence, cause first: why it could or could
	// not be fenced, when at the soonest, or what the taint waits for.
	Reason string `json:"reason"`
	// Agent is the agent's fencing report; nil when it has none.
	Agent *FencingAgent `json:"agent,omitempty"`
	// NodeBootID is the Node's status.nodeInfo.bootID; EarlierBoot is
	// true when the report names another one.
	NodeBootID  string `json:"nodeBootID"`
	EarlierBoot bool   `json:"earlierBoot,omitempty"`
	// FenceWaitSeconds is T + 2W + margin, stretched by the clock rate
	// bound (fencing.Timing.FenceWait with the default margin): how long
	// after its own read of a dead node the controller waits before it
	// asks the members to testify. Absent without W and T.
	FenceWaitSeconds *Seconds `json:"fenceWaitSeconds,omitempty"`
	// EarliestFencing is DetectedAt + FenceWaitSeconds for an armed node
	// dead on both planes and not tainted: no taint comes before it.
	EarliestFencing *time.Time `json:"earliestFencing,omitempty"`
	// OutOfService: the node carries node.kubernetes.io/out-of-service
	// (NoExecute), added at TaintedAt.
	OutOfService bool       `json:"outOfService"`
	TaintedAt    *time.Time `json:"taintedAt,omitempty"`
	// TaintedBy is "rebound" (annotation fencing.rebound.dev/fenced-boot-id,
	// FencedBootID its value) or "other" (a person or another fencing
	// agent); empty without the taint.
	TaintedBy    string `json:"taintedBy,omitempty"`
	FencedBootID string `json:"fencedBootID,omitempty"`
	// VerifiedRound is fencing.rebound.dev/verified: the round whose
	// re-read found nothing changed; only then are pods force-deleted.
	VerifiedRound string `json:"verifiedRound,omitempty"`
	// WaitingFor is what rebound's taint still waits for before it comes
	// off: "a new boot ID", "Ready", "N old pod(s) gone"; empty when
	// nothing (the controller takes it off on its next pass).
	WaitingFor []string `json:"waitingFor,omitempty"`
	// OpenRound is the round about the node open in the published
	// document: the members are asked to testify.
	OpenRound string `json:"openRound,omitempty"`
	// LastEvent is the controller's latest fencing Event about the node.
	LastEvent *FencingEvent `json:"lastEvent,omitempty"`
}

// FencingAgent is an agent's fencing report (PeeringReport.fencing).
type FencingAgent struct {
	Armed           bool      `json:"armed"`
	Reason          string    `json:"reason,omitempty"`
	WatchdogSeconds int32     `json:"watchdogSeconds"`
	SanctionSeconds int32     `json:"sanctionSeconds"`
	BootID          string    `json:"bootID"`
	ObservedAt      time.Time `json:"observedAt"`
	// Lists are the numbers of the member lists it counts against.
	Lists []int64 `json:"lists"`
}

// fencingInView: some agent reports fencing or some node carries the
// out-of-service taint. Only then does diagnose read the fencing Events
// and document, so that a cluster that does not fence costs no request.
func fencingInView(nodes []*corev1.Node, reports map[string]*v1alpha1.FencingReport) bool {
	return len(reports) > 0 || slices.ContainsFunc(nodes, func(n *corev1.Node) bool { return outOfService(n) != nil })
}

func outOfService(n *corev1.Node) *corev1.Taint {
	for i := range n.Spec.Taints {
		if rescue.IsFencingTaint(&n.Spec.Taints[i]) {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// gatherFencing reads the fencing reconciler's Events about Nodes, listed
// by reason, and the published document (got by name: diagnose's Role
// grants get on that one ConfigMap). Neither is needed for the rest of
// the report: a forbidden or failed read is a warning, never a failure.
func gatherFencing(ctx context.Context, c Clients, x *Extra, eventsForbidden bool) error {
	if !eventsForbidden {
	reasons:
		for _, reason := range fencingEventReasons {
			opts := metav1.ListOptions{Limit: pageSize, FieldSelector: "reason=" + reason + ",involvedObject.kind=Node"}
			for {
				l, err := c.Kube.CoreV1().Events("").List(ctx, opts)
				switch {
				case apierrors.IsForbidden(err):
					x.Warnings = append(x.Warnings, "cannot list Events: the fencing view has no controller Events (grant the rebound-diagnose ClusterRole from deploy/rbac)")
					break reasons
				case err != nil:
					return describe(c, "events", err)
				}
				for i := range l.Items {
					ev := &l.Items[i]
					if ev.InvolvedObject.Kind != "Node" || ev.Reason != reason {
						continue
					}
					x.FencingEvents = append(x.FencingEvents, FencingEvent{Node: ev.InvolvedObject.Name, Reason: ev.Reason, Message: ev.Message, Time: eventTime(ev)})
				}
				if l.Continue == "" {
					break
				}
				opts.Continue = l.Continue
			}
		}
	}

	ns, name := peering.DefaultPeerSetNamespace, fencing.DefaultDocumentName
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		x.FencingDocumentState = FencingDocumentNotPublished
	case apierrors.IsForbidden(err):
		x.FencingDocumentState = FencingDocumentForbidden
		x.Warnings = append(x.Warnings, fmt.Sprintf("cannot read the fencing document %s/%s (Forbidden): open rounds and the published list unknown; grant the rebound-diagnose-fencing Role (deploy/rbac)", ns, name))
	case err != nil:
		x.FencingDocumentState = FencingDocumentUnreadable
		x.Warnings = append(x.Warnings, fmt.Sprintf("cannot read the fencing document %s/%s: %s", ns, name, oneLine(err.Error())))
	default:
		d, perr := fencing.ParseDocument([]byte(cm.Data[fencing.DocumentKey]))
		if perr != nil {
			x.FencingDocumentState = FencingDocumentUnreadable
			x.Warnings = append(x.Warnings, fmt.Sprintf("%s/%s: %s", ns, name, oneLine(perr.Error())))
			break
		}
		x.FencingDocumentState = FencingDocumentPublished
		x.FencingDocument = &d
	}
	return nil
}

// eventTime is when an Event last happened, by the first time it carries.
func eventTime(ev *corev1.Event) time.Time {
	for _, t := range []time.Time{ev.LastTimestamp.Time, ev.EventTime.Time, ev.FirstTimestamp.Time, ev.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t.UTC()
		}
	}
	return time.Time{}
}

// fencing explains every node whose agent reports fencing or that carries
// the out-of-service taint; nil when there is none. It restates the
// controller's rule (fencing.Fencer) only as far as the API shows it:
// the rule itself runs on the controller's quorum reads and clock.
func (e *explainer) fencing() *Fencing {
	var nodes []*corev1.Node
	for _, n := range e.s.Nodes {
		if n != nil && (e.x.FencingReports[n.Name] != nil || outOfService(n) != nil) {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	f := &Fencing{Document: cmp.Or(e.x.FencingDocumentState, FencingDocumentUnreadable), Nodes: []FencingNode{}}
	rounds := map[string]string{}
	if d := e.x.FencingDocument; d != nil {
		f.ListNumber, f.Members, f.OpenRounds = d.List.Number, len(d.List.Members), len(d.Rounds)
		for _, r := range d.Rounds {
			rounds[r.Node] = r.Round
		}
	}
	last := map[string]FencingEvent{}
	for _, ev := range e.x.FencingEvents {
		if prev, ok := last[ev.Node]; !ok || ev.Time.After(prev.Time) {
			last[ev.Node] = ev
		}
	}
	for _, n := range nodes {
		fn := e.fencingNode(n, e.x.FencingReports[n.Name])
		fn.OpenRound = rounds[n.Name]
		if ev, ok := last[n.Name]; ok {
			fn.LastEvent = &ev
		}
		f.Nodes = append(f.Nodes, fn)
	}
	return f
}

func (e *explainer) fencingNode(n *corev1.Node, rep *v1alpha1.FencingReport) FencingNode {
	fn := FencingNode{Node: n.Name, NodeBootID: n.Status.NodeInfo.BootID}
	var timing fencing.Timing
	if rep != nil {
		a := &FencingAgent{Armed: rep.Armed, Reason: rep.Reason, WatchdogSeconds: rep.WatchdogSeconds, SanctionSeconds: rep.SanctionSeconds,
			BootID: rep.BootID, ObservedAt: rep.ObservedAt.UTC(), Lists: []int64{}}
		for _, l := range rep.Lists {
			a.Lists = append(a.Lists, l.Number)
		}
		fn.Agent = a
		fn.EarlierBoot = rep.BootID != fn.NodeBootID
		timing = fencing.ReportFromAPI("", rep).Timing
		if timing.Watchdog > 0 && timing.Sanction > 0 {
			s := Seconds(math.Round(timing.FenceWait(fencing.DefaultFenceMargin).Seconds()*10) / 10)
			fn.FenceWaitSeconds = &s
		}
	}

	if t := outOfService(n); t != nil {
		fn.OutOfService = true
		if t.TimeAdded != nil {
			at := t.TimeAdded.UTC()
			fn.TaintedAt = &at
		}
		boot := n.Annotations[fencing.AnnotationFencedBoot]
		if boot == "" {
			fn.TaintedBy, fn.State = "other", "TaintedByOther"
			fn.Reason = "carries node.kubernetes.io/out-of-service put by a person or another fencing agent (no " + fencing.AnnotationFencedBoot +
				" annotation): proof at once that its pods may go; rebound never takes it off"
			return fn
		}
		fn.TaintedBy, fn.FencedBootID, fn.VerifiedRound = "rebound", boot, n.Annotations[fencing.AnnotationVerified]
		fn.WaitingFor = e.untaintWaits(n, t, boot)
		waits := "waits for nothing more: the controller takes it off on its next pass"
		if len(fn.WaitingFor) > 0 {
			waits = "waits for " + strings.Join(fn.WaitingFor, ", ")
		}
		if fn.VerifiedRound != "" {
			fn.State = "Fenced"
			fn.Reason = fmt.Sprintf("fenced by rebound (boot %s), verified by round %s: its stateful pods may be force-deleted; to come off, the taint %s", boot, fn.VerifiedRound, waits)
		} else {
			fn.State = "Tainted"
			fn.Reason = fmt.Sprintf("tainted by rebound (boot %s), not verified: nothing is force-deleted until a re-read after the taint finds nothing changed "+
				"(a controller that did not put it never verifies it); to come off, the taint %s", boot, waits)
		}
		return fn
	}

	switch {
	case rep == nil:
		fn.State, fn.Reason = "NoReport", "its agent reports no fencing: rebound never fences it"
	case !rep.Armed || fn.FenceWaitSeconds == nil:
		why := rep.Reason
		if rep.Armed {
			why = "the report names no W or T"
		}
		fn.State = "NotArmed"
		fn.Reason = "not armed: " + cmp.Or(why, "the agent gives no reason") + "; rebound never fences it: its stateful pods wait for a person's out-of-service taint"
	case fn.EarlierBoot:
		fn.State = "EarlierBoot"
		fn.Reason = fmt.Sprintf("report of an earlier boot (the report names boot %s, the Node runs %s): not fenced until its agent reports this boot armed",
			orNone(rep.BootID), orNone(fn.NodeBootID))
	case len(rep.Lists) == 0:
		fn.State, fn.Reason = "NoList", "armed, but its report names no member list: not fenced"
	default:
		fn.State = "Armed"
		fn.Reason = e.whenFenced(n, rep, timing, &fn)
	}
	return fn
}

// whenFenced says when an armed node could be fenced at the soonest, and
// by whose testimony.
func (e *explainer) whenFenced(n *corev1.Node, rep *v1alpha1.FencingReport, timing fencing.Timing, fn *FencingNode) string {
	wait := timing.FenceWait(fencing.DefaultFenceMargin)
	var quorums []string
	for _, l := range rep.Lists {
		fl := fencing.List{Number: l.Number, Members: l.Members}
		others := len(fl.Members)
		if slices.Contains(fl.Members, n.Name) {
			others--
		}
		q := max(fl.Quorum(n.Name), 2)
		if others < q {
			return fmt.Sprintf("armed, but list %d has %d other member(s) and a fencing needs at least 2 witnesses: it cannot be fenced", l.Number, others)
		}
		quorums = append(quorums, fmt.Sprintf("%d of list %d's %d other members", q, l.Number, others))
	}
	witnesses := strings.Join(quorums, " and ")
	if v, ok := e.s.Verdicts[n.Name]; ok && v.Verdict == liveness.Dead && !v.DetectedAt.IsZero() {
		at := v.DetectedAt.Add(wait).UTC()
		fn.EarliestFencing = &at
		return fmt.Sprintf("dead on both planes since %s: fenced no sooner than %s (T + 2W + margin, %s, after the controller's read), once %s testify to hearing nothing from it",
			clock(v.DetectedAt, e.now), clock(at, e.now), wait.Round(100*time.Millisecond).String(), witnesses)
	}
	return fmt.Sprintf("armed: if it died now, fenced no sooner than %s (T + 2W + margin) after the controller reads it dead, once %s testify to hearing nothing from it",
		wait.Round(100*time.Millisecond).String(), witnesses)
}

// untaintWaits is what rebound's taint still waits for before the
// controller takes it off: the node on another boot than the one fenced,
// Ready, and none of the pods the taint is for left (created before it,
// not tolerating it), as the controller counts them.
func (e *explainer) untaintWaits(n *corev1.Node, t *corev1.Taint, boot string) []string {
	var out []string
	if n.Status.NodeInfo.BootID == boot {
		out = append(out, "a new boot ID")
	}
	if !kubestatus.NodeReady(n) {
		out = append(out, "Ready")
	}
	old := 0
	for _, p := range e.s.Pods {
		if p.Spec.NodeName != n.Name || (t.TimeAdded != nil && !p.CreationTimestamp.Time.Before(t.TimeAdded.Time)) {
			continue
		}
		if !slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(logr.Discard(), t, false) }) {
			old++
		}
	}
	if old > 0 {
		out = append(out, fmt.Sprintf("%d old pod(s) gone", old))
	}
	return out
}
