package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
	"rebound/pkg/rescue/execute"
)

// ReasonGossipPlaneDisagrees is the Node Event of a disagreement between
// the gossip and the Lease plane.
const ReasonGossipPlaneDisagrees = "GossipPlaneDisagrees"

// Judge is the controller's one judge of liveness. It owns the clocks
// every planner counts from: first sight of each node's Ready state
// (tracker, which the peering planner shares), the Lease plane (leases,
// nil: none), the history of the planes' disagreements (distrust, nil:
// none kept) and, when reports is set (agents report: their BGP sessions
// where peering runs, their gossip where they gossip), the agents'
// PeeringReports from the manager's cache. When the reports cannot be
// read the verdicts rest on the API alone, the safe side: no NotReady
// node counts as alive, and none as dead by the network's word. Every
// planner (rescue, the early marks, peering) reads its Assess; the
// executor's re-check right before a delete reads its Peek.
type Judge struct {
	reports  client.Reader
	tracker  *liveness.Tracker
	leases   *liveness.LeaseTracker
	distrust *liveness.DistrustTracker
	opts     liveness.Options

	metrics    verdictMetrics
	mismatches watcherMismatches
	disagree   disagreements
}

// NewJudge returns the judge over these trackers. events (nil: none)
// records each node's GossipPlaneDisagrees Event, once per disagreement.
func NewJudge(reports client.Reader, tracker *liveness.Tracker, leases *liveness.LeaseTracker, distrust *liveness.DistrustTracker, events *execute.Executor, opts liveness.Options) *Judge {
	if tracker == nil {
		tracker = &liveness.Tracker{}
	}
	return &Judge{reports: reports, tracker: tracker, leases: leases, distrust: distrust, opts: opts, disagree: disagreements{events: events}}
}

// Assess judges nodes at now for a planner's pass, and records what a
// pass records: first sights, the disagreements' history (which later
// verdicts read), the verdict metrics, the disagreement Events and the
// watcher-mismatch log.
func (j *Judge) Assess(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment {
	lnodes := kube.LivenessNodes(nodes)
	firstSeen := j.tracker.Observe(lnodes, now)
	rs := j.readReports(ctx)
	j.distrust.SeeReports(rs, now)
	a := liveness.Assess(liveness.Input{Nodes: lnodes, Reports: rs, FirstSeen: firstSeen, Leases: j.leases.Leases(),
		Distrust: j.distrust.Distrust(now), Options: j.opts}, now)
	j.distrust.Observe(a, now)
	j.metrics.observe(a, now)
	j.disagree.observe(ctx, nodes, a)
	j.mismatches.observe(ctx, j.opts.WatcherMismatches(rs, now))
	return a
}

// Peek judges as Assess would at now and records nothing: the executor's
// re-check right before a delete asks again without moving any clock,
// history, metric or Event that the passes keep.
func (j *Judge) Peek(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment {
	lnodes := kube.LivenessNodes(nodes)
	rs := j.readReports(ctx)
	return liveness.Assess(liveness.Input{Nodes: lnodes, Reports: rs, FirstSeen: j.tracker.Peek(lnodes, now), Leases: j.leases.Leases(),
		Distrust: j.distrust.Peek(rs, now), Options: j.opts}, now)
}

func (j *Judge) readReports(ctx context.Context) []liveness.Report {
	if j.reports == nil {
		return nil
	}
	var list v1alpha1.PeeringReportList
	if err := j.reports.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		logf.FromContext(ctx).Info("PeeringReports unreadable: verdicts from the API alone this pass", "error", err.Error())
		return nil
	}
	return kube.ReadableReports(list.Items)
}

// disagreements publishes rebound_gossip_disagreement and
// rebound_early_judgement_held, records one GossipPlaneDisagrees Event per
// node and disagreement (not one per pass), and logs each change of the
// cluster-wide hold.
type disagreements struct {
	events  *execute.Executor
	mu      sync.Mutex
	current map[string]liveness.DisagreementReason
	hold    string
}

func (d *disagreements) observe(ctx context.Context, nodes []*corev1.Node, a liveness.Assessment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := logf.FromContext(ctx)
	if d.current == nil {
		d.current = map[string]liveness.DisagreementReason{}
	}
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	for name, reason := range d.current {
		if now, ok := a.Disagreements[name]; !ok || now.Reason != reason {
			gossipDisagreement.DeleteLabelValues(name, string(reason))
			delete(d.current, name)
			if !ok {
				log.Info("the gossip plane agrees with the Lease plane again", "node", name, "was", reason)
			}
		}
	}
	for name, dis := range a.Disagreements {
		gossipDisagreement.WithLabelValues(name, string(dis.Reason)).Set(1)
		if _, seen := d.current[name]; seen {
			continue
		}
		d.current[name] = dis.Reason
		note := disagreementNote(name, dis, a)
		log.Info("the gossip plane disagrees with the Lease plane", "node", name, "reason", dis.Reason, "detail", note)
		if n := byName[name]; n != nil && d.events != nil {
			ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}
			if err := d.events.EventAbout(ctx, ref, nil, "JudgeLiveness", corev1.EventTypeWarning, ReasonGossipPlaneDisagrees, note); err != nil {
				log.Error(err, "Event not recorded", "node", name, "reason", ReasonGossipPlaneDisagrees)
			}
		}
	}
	earlyJudgementHeld.Reset()
	if h := a.Hold; h.Reason != "" {
		earlyJudgementHeld.WithLabelValues(h.Reason).Set(1)
	}
	if a.Hold.Reason != d.hold {
		if a.Hold.Reason != "" {
			log.Info("early judgement held cluster-wide", "hold", a.Hold.Reason, "until", a.Hold.Until.UTC().Format(time.RFC3339), "detail", a.Hold.Detail)
		} else {
			log.Info("early judgement no longer held", "was", d.hold)
		}
		d.hold = a.Hold.Reason
	}
}

// disagreementNote says what the planes say of name and what rebound
// does about it.
func disagreementNote(name string, dis liveness.Disagreement, a liveness.Assessment) string {
	note := fmt.Sprintf("%s: %s", dis.Reason, dis.Detail)
	switch {
	case a.Hold.Reason != "":
		note += fmt.Sprintf("; early judgement is held cluster-wide until %s: %s", a.Hold.Until.UTC().Format(time.RFC3339), a.Hold.Detail)
	case !a.Distrusted[name].IsZero():
		note += fmt.Sprintf("; its gossip plane is not trusted, so it is not judged early, until %s", a.Distrusted[name].UTC().Format(time.RFC3339))
	default:
		note += "; its member's silence is no vote: it is not judged dead by it"
	}
	return note
}

// watcherMismatches says, once per agent and number, which agents gossip
// with another --gossip-watchers than the controller's: their votes are
// partly not heard, so early detection weakens without any other sign.
// Every pass sets rebound_gossip_watchers_mismatched_agents.
type watcherMismatches struct {
	mu     sync.Mutex
	logged map[string]int // reporter -> the agent's number last logged
}

func (w *watcherMismatches) observe(ctx context.Context, ms []liveness.WatcherMismatch) {
	gossipWatchersMismatched.Set(float64(len(ms)))
	w.mu.Lock()
	defer w.mu.Unlock()
	now := make(map[string]int, len(ms))
	for _, m := range ms {
		now[m.Reporter] = m.Agent
		if k, ok := w.logged[m.Reporter]; ok && k == m.Agent {
			continue
		}
		logf.FromContext(ctx).Error(m, "gossip watchers differ: this agent's votes are not all heard", "node", m.Reporter, "agentWatchers", m.Agent, "controllerWatchers", m.Controller)
	}
	w.logged = now
}

// EventWriter records the controller's core/v1 Events through api, as the
// recovery and unreachable reconcilers do (the Judge's Node Events).
func EventWriter(api kubernetes.Interface) *execute.Executor {
	return &execute.Executor{Client: api, Component: eventComponent}
}
