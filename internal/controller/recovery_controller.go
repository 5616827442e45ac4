package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// RecoveryOptions configure the recovery controller.
type RecoveryOptions struct {
	// ZoneConfig mirrors kube-controller-manager's node lifecycle flags;
	// rebound must know them to predict upstream eviction.
	ZoneConfig zone.Config
	Defaults   rescue.Defaults
	// DryRun plans, logs and reports, but changes nothing, whatever the
	// policies say.
	DryRun bool
	// StopSwitch names a ConfigMap: while it exists, rebound takes no
	// action anywhere (reporting goes on). It is the cluster-wide stop an
	// operator pulls with one kubectl command.
	StopSwitch types.NamespacedName
	// Clock is injected for tests; nil means the real clock.
	Clock clock.PassiveClock
}

// recoveryKey is the one key the recovery controller reconciles: every
// decision depends on the whole cluster (zone states, limits), so any
// change enqueues the same request and the work queue collapses bursts.
var recoveryKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "cluster"}}

// RecoveryReconciler finds critical pods stranded on NotReady nodes and
// rescues them: snapshot, rescue.PlanFor, apply, requeue at NextCheck.
type RecoveryReconciler struct {
	client   client.Client
	reader   client.Reader // uncached, for the stop switch
	recorder events.EventRecorder
	opts     RecoveryOptions
	clock    clock.PassiveClock

	mu        sync.Mutex
	prevZones zone.Cluster
	announced map[string]bool // dry-run and stopped actions already logged
}

// SetupRecovery registers the recovery controller with the manager.
func SetupRecovery(mgr ctrl.Manager, opts RecoveryOptions) error {
	if err := opts.ZoneConfig.Validate(); err != nil {
		return err
	}
	r := &RecoveryReconciler{
		client:    mgr.GetClient(),
		reader:    mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorder("rebound-controller"),
		opts:      opts,
		clock:     opts.Clock,
		announced: map[string]bool{},
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{recoveryKey}
	})
	if err := indexPodsByNode(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	// Predicates (cache.go) keep heartbeats and healthy pods' churn from
	// starting passes.
	changed := builder.WithPredicates(trimmedChange())
	return ctrl.NewControllerManagedBy(mgr).
		Named("recovery").
		Watches(&v1alpha1.RecoveryPolicy{}, all, changed).
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodePredicate())).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(podPredicate(cachedNodeNotReady(mgr.GetCache())))).
		Watches(&corev1.Namespace{}, all, changed).
		Watches(&corev1.PersistentVolumeClaim{}, all, changed).
		Watches(&appsv1.ReplicaSet{}, all, changed).
		Watches(&appsv1.Deployment{}, all, changed).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// Reconcile plans from the caches and applies the plan. It is
// level-triggered: after a restart it recomputes the same plan, and every
// action it already took shows in the cluster (a terminating pod, a
// scale-bounce annotation), so nothing is repeated.
func (r *RecoveryReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	start := r.clock.Now()
	snap, err := r.snapshot(ctx, start)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := rescue.PlanFor(snap)
	planSeconds.Observe(r.clock.Since(start).Seconds())
	r.mu.Lock()
	r.prevZones = plan.Zones
	r.mu.Unlock()
	observePlan(plan)
	for _, w := range plan.Warnings {
		log.Info("warning", "detail", w)
	}

	stopped, err := r.stopSwitchPulled(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	owners := ownersByPod(plan)
	records := map[string][]v1alpha1.ActionRecord{}
	var errs []error
	acted := false
	done := r.applyAll(ctx, plan.Actions, stopped) // recovery_parallel.go
	for i, a := range plan.Actions {
		if why := r.holdReason(a, stopped); why != "" {
			r.announce(ctx, log, a, owners, why)
			continue
		}
		result, err := done[i].result, done[i].err
		rescuesTotal.WithLabelValues(string(a.Kind), result).Inc()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.Key(), err))
			log.Error(err, "action failed", "action", a.Kind, "object", a.Namespace+"/"+a.Name, "reason", a.Reason)
			r.event(ctx, a, owners, corev1.EventTypeWarning, "RescueFailed", fmt.Sprintf("%s failed: %v; %s", a.Kind, err, a.Reason))
			continue
		}
		acted = true
		log.Info("rescue action", "action", a.Kind, "object", a.Namespace+"/"+a.Name, "pod", a.Pod, "node", a.Node, "result", result, "reason", a.Reason)
		if result == resultSucceeded {
			r.event(ctx, a, owners, corev1.EventTypeNormal, a.Kind.EventReason(), a.Reason)
			if a.Policy != "" {
				records[a.Policy] = append(records[a.Policy], a.Record(r.clock.Now(), resultSucceeded))
			}
		}
	}
	if err := r.updateStatuses(ctx, snap.Policies, plan, records); err != nil {
		errs = append(errs, err)
	}

	res := ctrl.Result{}
	if !plan.NextCheck.IsZero() {
		res.RequeueAfter = max(plan.NextCheck.Sub(r.clock.Now()), 100*time.Millisecond)
	}
	if acted && (res.RequeueAfter == 0 || res.RequeueAfter > 2*time.Second) {
		// Look again soon to verify the effect; watches usually get there
		// first.
		res.RequeueAfter = 2 * time.Second
	}
	return res, kerrors.NewAggregate(errs)
}

func (r *RecoveryReconciler) stopSwitchPulled(ctx context.Context) (bool, error) {
	return readStopSwitch(ctx, r.reader, r.opts.StopSwitch)
}

// announce logs an action that is not taken, once per action and cause.
func (r *RecoveryReconciler) announce(ctx context.Context, log logr.Logger, a rescue.Action, owners map[string]rescue.Workload, why string) {
	key := a.Key() + "|" + why
	r.mu.Lock()
	seen := r.announced[key]
	r.announced[key] = true
	r.mu.Unlock()
	if seen {
		return
	}
	rescuesTotal.WithLabelValues(string(a.Kind), "dry_run").Inc()
	log.Info("rescue action not taken", "why", why, "action", a.Kind, "object", a.Namespace+"/"+a.Name, "reason", a.Reason)
	r.event(ctx, a, owners, corev1.EventTypeNormal, "RescueDryRun", fmt.Sprintf("would %s (%s): %s", a.Kind, why, a.Reason))
}

func ownersByPod(p rescue.Plan) map[string]rescue.Workload {
	out := make(map[string]rescue.Workload, len(p.Critical))
	for i := range p.Critical {
		out[p.Critical[i].Key()] = p.Critical[i].Workload
	}
	return out
}
