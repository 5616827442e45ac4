package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
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

// PeeringReconciler publishes the health-aware BGP peer set: snapshot of
// the nodes and the agents' PeeringReports, peering.Plan, then the set as
// one document agents watch (ConfigMap rebound-system/rebound-peer-set),
// the node label peering.rebound.dev/in-set on every selected node (for
// Calico), the Calico BGPPeer when configured, the planner's state in a
// ConfigMap, an Event per change, and a requeue at the plan's next check.
// The controller alone publishes; agents only report.
type PeeringReconciler struct {
	client   client.Client
	reader   client.Reader // uncached: the state ConfigMap, Calico objects
	recorder events.EventRecorder
	opts     PeeringOptions

	mu        sync.Mutex
	state     *peering.State // nil until loaded from the ConfigMap
	savedJSON string         // what the ConfigMap holds
	last      peering.Result // the last plan, for Plan() and tests
	frozen    string         // the freeze reason last announced, "" when not frozen
	stopped   bool           // the stop switch was pulled at the last pass
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

// Reconcile: snapshot, plan, apply, requeue at the next check. The state
// ConfigMap is written before the set is published, so that it is always
// at least as new as what was published; the published document comes
// before the labels (agents read it; the labels are for Calico and
// humans); labels are level-triggered and converge on the next run if a
// patch fails. While the stop switch is pulled nothing is published and
// the state does not advance.
func (r *PeeringReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("controller", r.opts.Name)
	res, err := r.pass(ctx, log)
	return afterError(log, res, err)
}

// pass is one reconcile; its error goes through afterError, with the
// result carrying the plan's next check wherever a plan was made.
func (r *PeeringReconciler) pass(ctx context.Context, log logr.Logger) (ctrl.Result, error) {
	now := r.opts.Clock.Now()

	// Read-only views of the cache, not copies (see cache.go): at 1,000
	// nodes and as many reports a deep copy per pass is most of its cost.
	// Nothing below writes to them; patches go through fresh objects.
	var list corev1.NodeList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("list nodes: %w", err)
	}
	var reports v1alpha1.PeeringReportList
	if err := r.client.List(ctx, &reports, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("list PeeringReports: %w", err)
	}
	nodes, rs, bad := peeringSnapshot(list.Items, reports.Items, r.opts.NodeSelector)
	for _, err := range bad {
		log.Info("agent report ignored", "detail", err.Error())
	}
	for _, err := range peering.ValidateNodes(nodes) {
		log.V(1).Info("node cannot be planned normally", "detail", err.Error())
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == nil {
		st, err := loadPeeringState(ctx, r.reader, r.opts.State, list.Items)
		if err != nil {
			return ctrl.Result{}, err
		}
		r.state = &st
		data, _ := json.Marshal(st)
		r.savedJSON = string(data)
		log.Info("peering state loaded", "configMap", r.opts.State.String(), "nodes", len(st.Nodes))
	}

	firstSeen := r.opts.Tracker.Observe(livenessNodes(nodes), now)
	res := peering.Plan(peering.Input{Nodes: nodes, Reports: rs, FirstSeen: firstSeen, State: *r.state, Config: r.opts.Config}, now)
	r.last = res
	peerSetSize.WithLabelValues(r.opts.Name).Set(float64(len(res.Peers)))
	observePeeringNodes(r.opts.Name, res)
	r.noteFrozen(ctx, log, res)

	stopped, err := readStopSwitch(ctx, r.reader, r.opts.StopSwitch)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stopped != r.stopped {
		r.stopped = stopped
		log.Info("stop switch", "pulled", stopped, "configMap", r.opts.StopSwitch.String(), "pendingChanges", len(res.Changes))
	}
	if stopped {
		peerSetStopped.WithLabelValues(r.opts.Name).Set(1)
		return ctrl.Result{RequeueAfter: stoppedRecheck}, nil
	}
	peerSetStopped.WithLabelValues(r.opts.Name).Set(0)

	var errs []error
	out := ctrl.Result{}
	if !res.NextCheck.IsZero() {
		out.RequeueAfter = max(res.NextCheck.Sub(r.opts.Clock.Now()), 100*time.Millisecond)
	}
	if data, _ := json.Marshal(res.State); string(data) != r.savedJSON {
		if err := savePeeringState(ctx, r.reader, r.client, r.opts.State, res.State, res.PeerNames()); err != nil {
			// Do not publish what could not be recorded: the next run
			// plans again from the old state.
			return out, err
		}
		r.savedJSON = string(data)
	}
	st := res.State
	r.state = &st

	for _, c := range res.Changes {
		peerSetChanges.WithLabelValues(r.opts.Name, string(c.Kind)).Inc()
		log.Info("peer set change", "node", c.Name, "change", c.Kind, "reason", c.Reason, "detail", c.Message, "dryRun", r.opts.DryRun)
	}
	if !r.opts.DryRun {
		if err := r.publishPeerSet(ctx, log, res, now); err != nil {
			// Agents read the document: without it, publishing labels
			// would only confuse Calico and humans about what agents do.
			return out, err
		}
		errs = append(errs, r.publishLabels(ctx, log, list.Items, res)...)
		if r.opts.Calico != nil {
			if err := r.publishCalico(ctx, log); err != nil {
				errs = append(errs, err)
			}
		}
	}

	return out, kerrors.NewAggregate(errs)
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

// publishLabels sets peering.rebound.dev/in-set to "true" or "false" on
// every planned node whose label differs, with an Event for each change.
func (r *PeeringReconciler) publishLabels(ctx context.Context, log logr.Logger, nodes []corev1.Node, res peering.Result) []error {
	decisions := make(map[string]peering.Decision, len(res.Decisions))
	for _, d := range res.Decisions {
		decisions[d.Name] = d
	}
	var errs []error
	for i := range nodes {
		n := &nodes[i]
		d, planned := decisions[n.Name]
		if !planned {
			continue
		}
		want := "false"
		if d.InSet {
			want = "true"
		}
		if n.Labels[peering.LabelInSet] == want {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, peering.LabelInSet, want)
		// A fresh object: the response is decoded into it, and n shares
		// its maps with the cache.
		target := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
		if err := r.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("label node %s %s=%s: %w", n.Name, peering.LabelInSet, want, err))
			}
			continue
		}
		reason, note := "PeerSetRemoved", "left out of the BGP peer set: "+d.Message
		if d.InSet {
			reason, note = "PeerSetAdded", "in the BGP peer set: "+d.Message
		}
		typ := corev1.EventTypeNormal
		if !d.InSet {
			typ = corev1.EventTypeWarning
		}
		r.recorder.Eventf(n, nil, typ, reason, "PublishPeerSet", "%s", note)
		log.Info("peer set published", "node", n.Name, peering.LabelInSet, want, "reason", d.Reason)
	}
	return errs
}

// publishCalico makes sure the BGPPeer that meshes the set exists with the
// wanted spec. It never touches the BGPConfiguration: switching Calico's
// own node-to-node mesh off is the operator's step of the migration.
func (r *PeeringReconciler) publishCalico(ctx context.Context, log logr.Logger) error {
	gvk, err := calico.ServedBGPPeerAPI(r.client.RESTMapper())
	if err != nil {
		return reconcile.TerminalError(fmt.Errorf("calico backend: install Calico's CRDs or drop the Calico option: %w", err))
	}
	want := calico.BGPPeerAs(gvk, *r.opts.Calico)
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	err = r.reader.Get(ctx, client.ObjectKey{Name: want.GetName()}, got)
	switch {
	case meta.IsNoMatchError(err):
		return reconcile.TerminalError(fmt.Errorf("calico backend: the API server does not serve %s: install Calico's CRDs or drop the Calico option: %w", gvk, err))
	case apierrors.IsNotFound(err):
		if err := r.client.Create(ctx, want); err != nil {
			return fmt.Errorf("calico backend: create BGPPeer %s: %w", want.GetName(), err)
		}
		log.Info("Calico BGPPeer created", "name", want.GetName(), "apiVersion", gvk.GroupVersion().String(), "selector", calico.InSetSelector)
		return nil
	case err != nil:
		return fmt.Errorf("calico backend: read BGPPeer %s: %w", want.GetName(), err)
	}
	if calico.SpecEqual(got, want) {
		return nil
	}
	spec, _, _ := unstructured.NestedMap(want.Object, "spec")
	if err := unstructured.SetNestedMap(got.Object, spec, "spec"); err != nil {
		return err
	}
	if err := r.client.Update(ctx, got); err != nil {
		return fmt.Errorf("calico backend: update BGPPeer %s: %w", want.GetName(), err)
	}
	log.Info("Calico BGPPeer updated", "name", want.GetName())
	return nil
}

// LastPlan returns the last plan, for diagnostics and tests.
func (r *PeeringReconciler) LastPlan() peering.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}
