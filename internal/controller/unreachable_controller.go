package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue/execute"
	"rebound/pkg/unreachable"
)

// UnreachableOptions configure the reconciler that acts on two-plane
// verdicts (pkg/unreachable): it taints a node dead on both planes that
// the API still has Ready, marks its pods not ready when MarkPodsNotReady,
// and takes the taint off the moment the verdict is not Dead.
type UnreachableOptions struct {
	// Plan holds the budget and whether pods are marked (the controller's
	// --mark-pods-not-ready-early).
	Plan unreachable.Options
	// Liveness returns the verdicts: the function the recovery reconciler
	// reads (Judge.Assess), so that both act on the same clocks. nil
	// means verdicts from the API alone, which never say Dead early: the
	// reconciler then only takes rebound's taints off (fail open).
	Liveness func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment
	// WatchReports starts a pass when an agent's PeeringReport says
	// something new (a gossip watcher's vote); WatchLeases when the Lease
	// of a node that carries rebound's taint is renewed, so that the
	// taint comes off at once. Set them when Liveness reads the reports
	// and the Lease plane.
	WatchReports, WatchLeases bool
	// DryRun plans, logs and reports, changing nothing but rebound's own
	// taint, which comes off as without it (see gate).
	DryRun bool
	// StopSwitch: while the ConfigMap exists no node is marked and no pod
	// marked not ready. rebound's taint still comes off: the switch must
	// leave the cluster as it would be without rebound.
	StopSwitch types.NamespacedName
	// Clock is injected for tests; nil means the real clock.
	Clock clock.PassiveClock
	// APIClient writes, and reads what a write rests on, uncached; nil
	// means one built from the manager's config.
	APIClient kubernetes.Interface
}

// unreachableKey is the one key of the reconciler: the budget is the
// whole cluster's.
var unreachableKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "unreachable"}}

// UnreachableReconciler applies unreachable.PlanFor: snapshot, plan,
// apply, requeue at the earlier of the plan's and the verdicts' next
// change.
type UnreachableReconciler struct {
	client client.Client // the caches
	reader client.Reader // uncached: the stop switch
	api    kubernetes.Interface
	events *execute.Executor // Events only
	opts   UnreachableOptions
	clock  clock.PassiveClock

	mu        sync.Mutex
	ledger    []unreachable.Mark // taints added within the last minute
	announced map[string]bool    // holds and gated actions already reported
}

// SetupUnreachable registers the reconciler with the manager. It runs
// whatever the flags: without the Lease plane no verdict is Dead early, and
// all it does is take off the taints an earlier run left.
func SetupUnreachable(mgr ctrl.Manager, opts UnreachableOptions) error {
	if err := opts.Plan.Validate(); err != nil {
		return err
	}
	if opts.APIClient == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("API client for the unreachable controller: %w", err)
		}
		opts.APIClient = cs
	}
	r := newUnreachableReconciler(mgr.GetClient(), mgr.GetAPIReader(), opts)
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{unreachableKey}
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("unreachable").
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodePredicate()))
	if opts.WatchReports {
		b = b.Watches(&v1alpha1.PeeringReport{}, all, builder.WithPredicates(reportContentChanged()))
	}
	if opts.WatchLeases {
		b = b.Watches(&coordinationv1.Lease{}, all, builder.WithPredicates(markedNodeLease(mgr.GetCache())))
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: 1}).Complete(r)
}

func newUnreachableReconciler(c client.Client, reader client.Reader, opts UnreachableOptions) *UnreachableReconciler {
	r := &UnreachableReconciler{client: c, reader: reader, api: opts.APIClient, opts: opts, clock: opts.Clock, announced: map[string]bool{}}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.events = &execute.Executor{Client: opts.APIClient, Component: eventComponent, Now: r.clock.Now}
	return r
}

// markedNodeLease passes the events of the Leases whose node carries
// rebound's taint: a renewal there ends the verdict, and the taint must
// come off at once. The other renewals, about one a second per ten nodes,
// start no pass.
func markedNodeLease(nodes client.Reader) predicate.Predicate {
	marked := func(o client.Object) bool {
		var n corev1.Node
		if err := nodes.Get(context.Background(), types.NamespacedName{Name: o.GetName()}, &n, client.UnsafeDisableDeepCopy); err != nil {
			return false
		}
		return unreachable.Tainted(&n) != nil
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return marked(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return marked(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return marked(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return marked(e.Object) },
	}
}

// Reconcile is level-triggered: the plan is made from the nodes' taints,
// the pods' Ready conditions and the verdicts, so a restarted controller
// repeats nothing that took effect, and a write made from a stale read is
// refused by its resourceVersion.
func (r *UnreachableReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	now := r.clock.Now()
	snap, staleAt, err := r.snapshot(ctx, now)
	if err != nil {
		return afterError(log, ctrl.Result{}, fmt.Errorf("snapshot: %w", err))
	}
	plan := unreachable.PlanFor(snap)
	r.reportHolds(ctx, log, snap.Nodes, plan)

	stopped, stopErr := readStopSwitch(ctx, r.reader, r.opts.StopSwitch)
	if stopErr != nil {
		log.Error(stopErr, "stop switch unreadable: marking nothing")
		stopped = true
	}
	byName := make(map[string]*corev1.Node, len(snap.Nodes))
	tainted := map[string]bool{}
	for _, n := range snap.Nodes {
		byName[n.Name] = n
		tainted[n.Name] = unreachable.Tainted(n) != nil
	}
	var errs []error
	acted := false
	// The taints first, one by one; then the pods of the nodes that carry
	// the taint, in parallel: a node's pods are independent writes, and a
	// hundred of them one after another would keep its traffic flowing
	// for seconds more.
	var marks []unreachable.Action
	for _, a := range plan.Actions {
		if why := r.gate(a, stopped, stopErr); why != "" {
			r.announce(ctx, log, a, byName[a.Node], why)
			continue
		}
		if a.Kind == unreachable.MarkPodNotReady {
			marks = append(marks, a)
			continue
		}
		o := r.apply(ctx, a, now)
		if r.record(ctx, log, a, o, byName[a.Node]) {
			acted = true
		}
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		tainted[a.Node] = o.tainted
		if a.Kind == unreachable.AddTaint && o.result == resultSucceeded {
			r.remember(a.Node, now)
		}
	}
	// Taint first: a pod is marked only on a node no replacement can be
	// scheduled onto.
	marks = slices.DeleteFunc(marks, func(a unreachable.Action) bool {
		if !tainted[a.Node] {
			earlyActions.WithLabelValues(string(a.Kind), resultRefused).Inc()
		}
		return !tainted[a.Node]
	})
	outcomes := make([]earlyOutcome, len(marks))
	inParallel(len(marks), func(i int) {
		outcomes[i] = r.apply(ctx, marks[i], now)
		r.record(ctx, log, marks[i], outcomes[i], byName[marks[i].Node])
	})
	marked := map[string][]string{}
	for i, o := range outcomes {
		switch {
		case o.err != nil:
			errs = append(errs, o.err)
		case o.result == resultSucceeded:
			acted = true
			marked[marks[i].Node] = append(marked[marks[i].Node], marks[i].Namespace+"/"+marks[i].Pod)
		}
	}
	for node, pods := range marked {
		r.nodeEvent(ctx, log, byName[node], string(unreachable.MarkPodNotReady), corev1.EventTypeWarning, reasonPodsMarkedNotReady,
			fmt.Sprintf("%d pod(s) marked not ready (%s): node %s is dead on both planes though the API still has it Ready, so EndpointSlices stop sending it traffic; its kubelet sets them Ready again on its next status sync if it is alive",
				len(pods), firstFew(pods), node))
	}
	n := 0
	for _, t := range tainted {
		if t {
			n++
		}
	}
	unreachableNodes.Set(float64(n))
	return r.requeue(plan, staleAt, acted, len(errs) > 0), nil
}

// record counts, logs and records the Event of one applied action, and
// reports whether it changed the cluster.
func (r *UnreachableReconciler) record(ctx context.Context, log logr.Logger, a unreachable.Action, o earlyOutcome, n *corev1.Node) bool {
	earlyActions.WithLabelValues(string(a.Kind), o.result).Inc()
	switch {
	case o.err != nil:
		log.Error(o.err, "early action failed", "action", a.Kind, "node", a.Node, "pod", podRef(a), "reason", a.Reason)
		r.nodeEvent(ctx, log, n, string(a.Kind), corev1.EventTypeWarning, reasonUnreachableFailed, fmt.Sprintf("%s failed: %s; %s", a.Kind, o.detail, a.Reason))
		return false
	case o.result != resultSucceeded:
		log.V(1).Info("early action not applied", "action", a.Kind, "node", a.Node, "pod", podRef(a), "result", o.result, "detail", o.detail)
		return false
	}
	log.Info("early action", "action", a.Kind, "node", a.Node, "pod", podRef(a), "reason", a.Reason)
	switch a.Kind {
	case unreachable.AddTaint:
		r.nodeEvent(ctx, log, n, string(a.Kind), corev1.EventTypeWarning, reasonUnreachableTainted, a.Reason)
	case unreachable.RemoveTaint:
		r.nodeEvent(ctx, log, n, string(a.Kind), corev1.EventTypeNormal, reasonUnreachableUntainted, a.Reason)
	case unreachable.MarkPodNotReady:
		r.podEvent(ctx, log, a)
	}
	return true
}

// snapshot reads the nodes from the cache, the verdicts, and, for the
// nodes dead on both planes while the API has them Ready, their pods from
// the API: the cache keeps no pod's Ready condition, and the marks are
// written against the versions read here.
func (r *UnreachableReconciler) snapshot(ctx context.Context, now time.Time) (unreachable.Snapshot, time.Time, error) {
	s := unreachable.Snapshot{Now: now, Options: r.opts.Plan, Recent: r.recent(now)}
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return s, time.Time{}, fmt.Errorf("list nodes: %w", err)
	}
	s.Nodes = pointers(nodes.Items)
	var staleAt time.Time
	if r.opts.Liveness != nil {
		a := r.opts.Liveness(ctx, s.Nodes, now)
		s.Verdicts, staleAt = a.Nodes, a.StaleAt
	}
	if !r.opts.Plan.MarkPodsNotReady {
		return s, staleAt, nil
	}
	for _, n := range s.Nodes {
		if !unreachable.DeadEarly(n, s.Verdicts[n.Name]) {
			continue
		}
		pods, err := r.api.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
		if err != nil {
			return s, staleAt, fmt.Errorf("list the pods of node %s: %w", n.Name, err)
		}
		s.Pods = append(s.Pods, pointers(pods.Items)...)
	}
	return s, staleAt, nil
}

// gate says why an action is not taken now, or "". Taking rebound's own
// taint off is never gated: it is the way back to upstream, and without
// rebound no node would carry it. With the stop switch pulled the
// cluster must behave as without rebound; a --dry-run controller never
// adds the taint, so any it finds was left by an earlier run.
func (r *UnreachableReconciler) gate(a unreachable.Action, stopped bool, stopErr error) string {
	switch {
	case a.Kind == unreachable.RemoveTaint:
		return ""
	case r.opts.DryRun:
		return "controller runs with --dry-run"
	case stopErr != nil:
		return "the stop switch cannot be read"
	case stopped:
		return fmt.Sprintf("stop switch ConfigMap %s exists", r.opts.StopSwitch)
	}
	return ""
}

// announce logs and records an action not taken, once per action and
// cause.
func (r *UnreachableReconciler) announce(ctx context.Context, log logr.Logger, a unreachable.Action, n *corev1.Node, why string) {
	if !r.firstTime(a.Key() + "|" + why) {
		return
	}
	earlyActions.WithLabelValues(string(a.Kind), resultDryRun).Inc()
	log.Info("early action not taken", "why", why, "action", a.Kind, "node", a.Node, "pod", podRef(a), "reason", a.Reason)
	if a.Kind != unreachable.MarkPodNotReady {
		r.nodeEvent(ctx, log, n, string(a.Kind), corev1.EventTypeNormal, reasonUnreachableDryRun, fmt.Sprintf("would %s (%s): %s", a.Kind, why, a.Reason))
	}
}

// reportHolds publishes the holds and records each once per node and
// kind, with its reason, as a Warning Event on the node.
func (r *UnreachableReconciler) reportHolds(ctx context.Context, log logr.Logger, nodes []*corev1.Node, plan unreachable.Plan) {
	unreachableHeld.Reset()
	counts := map[unreachable.HoldKind]int{unreachable.HeldBudget: 0, unreachable.HeldRateLimited: 0}
	held := map[string]bool{}
	for _, h := range plan.Held {
		counts[h.Kind]++
		key := "held|" + h.Node + "|" + string(h.Kind)
		held[key] = true
		if !r.firstTime(key) {
			continue
		}
		log.Info("node dead on both planes not marked", "node", h.Node, "hold", h.Kind, "reason", h.Reason)
		i := slices.IndexFunc(nodes, func(n *corev1.Node) bool { return n.Name == h.Node })
		if i >= 0 {
			r.nodeEvent(ctx, log, nodes[i], "Hold", corev1.EventTypeWarning, reasonUnreachableHeld, h.Reason)
		}
	}
	for kind, n := range counts {
		unreachableHeld.WithLabelValues(string(kind)).Set(float64(n))
	}
	// A hold that ended may be reported again when it comes back.
	r.mu.Lock()
	for k := range r.announced {
		if strings.HasPrefix(k, "held|") && !held[k] {
			delete(r.announced, k)
		}
	}
	r.mu.Unlock()
}

func (r *UnreachableReconciler) firstTime(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.announced[key]
	r.announced[key] = true
	return !seen
}

// remember adds a taint to the ledger; recent returns the ledger's last
// minute.
func (r *UnreachableReconciler) remember(node string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ledger = append(r.ledger, unreachable.Mark{Node: node, At: at})
}

func (r *UnreachableReconciler) recent(now time.Time) []unreachable.Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ledger = slices.DeleteFunc(r.ledger, func(m unreachable.Mark) bool { return !m.At.After(now.Add(-time.Minute)) })
	return slices.Clone(r.ledger)
}

// requeue: the earlier of the plan's next check and the verdicts'; soon
// after an action, to see its effect; within retryAfterError after an
// error.
func (r *UnreachableReconciler) requeue(plan unreachable.Plan, staleAt time.Time, acted, failed bool) ctrl.Result {
	return nextPass(r.clock.Now(), plan.NextCheck, staleAt, acted, failed)
}

func podRef(a unreachable.Action) string {
	if a.Pod == "" {
		return ""
	}
	return a.Namespace + "/" + a.Pod
}

func firstFew(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v and %d more", names[:shown], len(names)-shown)
}
