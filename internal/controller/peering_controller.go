package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"rebound/api/v1alpha1"
	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
)

var (
	peerSetSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_peering_set_size",
		Help: "Nodes in the published BGP peer set.",
	}, []string{"controller"})
	peerSetChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rebound_peering_changes_total",
		Help: "Nodes added to or removed from the published BGP peer set, by kind.",
	}, []string{"controller", "kind"})
	peerSetFrozen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_peering_frozen",
		Help: "1 while the published BGP peer set is frozen (full disruption, or too many members leaving at once), else 0.",
	}, []string{"controller"})
	peerSetStopped = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_peering_stopped",
		Help: "1 while the stop switch holds every peering change, else 0.",
	}, []string{"controller"})
)

func init() {
	metrics.Registry.MustRegister(peerSetSize, peerSetChanges, peerSetFrozen, peerSetStopped)
}

// PeeringReconciler publishes the health-aware BGP peer set: a snapshot
// of the nodes and the agents' PeeringReports (peering_snapshot.go),
// peering.Plan, the planner's state in a ConfigMap (peering_state.go),
// then one publisher per concern (peering_publish.go): the set as one
// document agents watch (ConfigMap rebound-system/rebound-peer-set), the
// node label peering.rebound.dev/in-set on every selected node (for
// Calico) with an Event per change, and the Calico BGPPeer when
// configured; it comes back at the plan's next check.
// The controller alone publishes; agents only report.
type PeeringReconciler struct {
	client   client.Client
	reader   client.Reader // uncached: the state ConfigMap, Calico objects
	recorder events.EventRecorder
	opts     PeeringOptions
	// discovery lists the API groups, for the Calico BGPPeer's group
	// (calico.DiscoverAPIGroup); set when opts.Calico is.
	discovery discovery.ServerGroupsInterface

	mu        sync.Mutex
	state     *peering.State // nil until loaded from the ConfigMap
	savedJSON string         // what the ConfigMap holds
	last      peering.Result // the last plan, for LastPlan and tests
	frozen    string         // the freeze reason last announced, "" when not frozen
	stopped   bool           // the stop switch was pulled at the last pass
	calico    string         // the Calico API group and reason last logged
}

// peeringKey is the one key: the set is one decision over all nodes.
var peeringKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "peer-set"}}

// SetupPeering registers the peering controller with the manager. Invalid
// options fail here, naming the field.
func SetupPeering(mgr ctrl.Manager, opts PeeringOptions) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	opts = opts.withDefaults()
	r := &PeeringReconciler{
		client:   mgr.GetClient(),
		reader:   mgr.GetAPIReader(),
		recorder: mgr.GetEventRecorder("rebound-" + opts.Name),
		opts:     opts,
	}
	if opts.Calico != nil {
		d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("calico backend: discovery client: %w", err)
		}
		r.discovery = d
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{peeringKey}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(opts.Name).
		Watches(&corev1.Node{}, all, builder.WithPredicates(peeringRelevantChange())).
		Watches(&v1alpha1.PeeringReport{}, all, builder.WithPredicates(reportContentChange(opts.Config.WithDefaults().Evidence.ReportMaxAge))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// stoppedRecheck is how often a pass looks at the stop switch again while
// it is pulled: the switch is a ConfigMap read uncached, not watched.
const stoppedRecheck = 10 * time.Second

// Reconcile is one pass: snapshot, plan, the stop switch, save the
// state, run the publishers, and come back at the plan's next check. The
// state ConfigMap is written before anything is published, so that it is
// always at least as new as what was published. Publishers are
// level-triggered and converge on the next pass if one fails. While the
// stop switch is pulled nothing is published and the state does not
// advance.
func (r *PeeringReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("controller", r.opts.Name)
	ctx = ctrl.LoggerInto(ctx, log)
	r.mu.Lock()
	defer r.mu.Unlock()
	res, err := r.pass(ctx, log)
	return afterError(log, res, err)
}

// pass is one reconcile; its error goes through afterError, with the
// result carrying the plan's next check wherever a plan was made.
func (r *PeeringReconciler) pass(ctx context.Context, log logr.Logger) (ctrl.Result, error) {
	snap, err := r.snapshot(ctx, log)
	if err != nil {
		return ctrl.Result{}, err
	}
	res := peering.Plan(snap.Input, snap.Now)
	r.observe(ctx, log, res)

	stopped, err := r.stopSwitch(ctx, log, res)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stopped {
		return ctrl.Result{RequeueAfter: stoppedRecheck}, nil
	}

	if err := r.saveState(ctx, res); err != nil {
		// Do not publish what could not be recorded.
		return r.next(res, true), err
	}
	r.logChanges(log, res)
	out := peeringOutcome{Result: res, Nodes: snap.Nodes, Now: snap.Now}
	if r.opts.Calico != nil && !r.opts.DryRun {
		out.Calico = r.calicoAPIGroup(log)
	}
	err = publishAll(ctx, r.publishers(), out)
	return r.next(res, err != nil), err
}

// next is the shared requeue rule (nextPass) for a plan. The plan's next
// check already counts the moment a report ages out, so there is no
// separate verdict change.
func (r *PeeringReconciler) next(res peering.Result, failed bool) ctrl.Result {
	return nextPass(r.opts.Clock.Now(), res.NextCheck, time.Time{}, false, failed)
}

// observe keeps the plan for LastPlan and reports it: the gauges, and a
// freeze or its end.
func (r *PeeringReconciler) observe(ctx context.Context, log logr.Logger, res peering.Result) {
	r.last = res
	peerSetSize.WithLabelValues(r.opts.Name).Set(float64(len(res.Peers)))
	observePeeringNodes(r.opts.Name, res)
	r.noteFrozen(ctx, log, res)
}

// stopSwitch reads the stop switch, logs when it is pulled or released,
// and sets its gauge.
func (r *PeeringReconciler) stopSwitch(ctx context.Context, log logr.Logger, res peering.Result) (bool, error) {
	stopped, err := readStopSwitch(ctx, r.reader, r.opts.StopSwitch)
	if err != nil {
		return false, err
	}
	if stopped != r.stopped {
		r.stopped = stopped
		log.Info("stop switch", "pulled", stopped, "configMap", r.opts.StopSwitch.String(), "pendingChanges", len(res.Changes))
	}
	gauge := 0.0
	if stopped {
		gauge = 1
	}
	peerSetStopped.WithLabelValues(r.opts.Name).Set(gauge)
	return stopped, nil
}

// logChanges counts and logs each change of the set, once, when its
// state is recorded (a dry run logs them too).
func (r *PeeringReconciler) logChanges(log logr.Logger, res peering.Result) {
	for _, c := range res.Changes {
		peerSetChanges.WithLabelValues(r.opts.Name, string(c.Kind)).Inc()
		log.Info("peer set change", "node", c.Name, "change", c.Kind, "reason", c.Reason, "detail", c.Message, "dryRun", r.opts.DryRun)
	}
}

// noteFrozen announces a freeze and its end: a log line, an Event on the
// published set's ConfigMap, and the frozen gauge.
func (r *PeeringReconciler) noteFrozen(ctx context.Context, log logr.Logger, res peering.Result) {
	if res.Frozen {
		peerSetFrozen.WithLabelValues(r.opts.Name).Set(1)
	} else {
		peerSetFrozen.WithLabelValues(r.opts.Name).Set(0)
	}
	if res.FrozenReason == r.frozen {
		return
	}
	regarding := &corev1.ConfigMap{}
	regarding.Namespace, regarding.Name = r.opts.PeerSet.Namespace, r.opts.PeerSet.Name
	if err := r.reader.Get(ctx, r.opts.PeerSet, regarding); err != nil {
		regarding = nil // first publish: nothing to hang the Event on yet
	}
	if res.Frozen {
		log.Info("peer set frozen: nobody leaves", "reason", res.FrozenReason, "members", len(res.Peers))
		if regarding != nil {
			r.recorder.Eventf(regarding, nil, corev1.EventTypeWarning, "PeerSetFrozen", "PublishPeerSet", "%s", res.FrozenReason)
		}
	} else {
		log.Info("peer set no longer frozen", "members", len(res.Peers))
		if regarding != nil {
			r.recorder.Eventf(regarding, nil, corev1.EventTypeNormal, "PeerSetUnfrozen", "PublishPeerSet", "the peer set follows node health again")
		}
	}
	r.frozen = res.FrozenReason
}

// calicoAPIGroup chooses, at every pass, the group the Calico BGPPeer is
// written to: the one calico-node's confd reads (calico.ChooseAPIGroup),
// which changes when Calico's CRDs are installed or removed. The choice and
// its reason are logged when they change.
func (r *PeeringReconciler) calicoAPIGroup(log logr.Logger) *calicoGroup {
	choice, err := calico.DiscoverAPIGroup(r.discovery, r.opts.Calico.APIGroup)
	g := &calicoGroup{Choice: choice, Err: err}
	if said := g.group() + "\x00" + g.reason(); said != r.calico {
		r.calico = said
		if err != nil {
			log.Error(err, "Calico BGPPeer: no API group to write it to", "setting", calicoSetting(r.opts.Calico.APIGroup))
		} else {
			log.Info("Calico BGPPeer API group", "apiGroup", g.group(), "reason", g.reason(), "setting", calicoSetting(r.opts.Calico.APIGroup))
		}
	}
	return g
}

// calicoSetting is the setting as the flag spells it.
func calicoSetting(s string) string {
	if v, err := calico.ParseAPIGroup(s); err == nil {
		return v
	}
	return s
}

// LastPlan returns the last plan, for diagnostics and tests.
func (r *PeeringReconciler) LastPlan() peering.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}
