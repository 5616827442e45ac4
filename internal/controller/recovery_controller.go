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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
	"rebound/pkg/rescue/execute"
	"rebound/pkg/zone"
)

// RecoveryOptions configure the recovery controller.
type RecoveryOptions struct {
	// FencingTargets, when set, receives every plan's Plan.Fencing: the
	// nodes the fencing reconciler may fence.
	FencingTargets *FencingTargets
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
	// APIClient reads and writes through the API server, uncached: the
	// executor's re-reads (node before a force delete, Deployment before
	// a scale) and its writes. nil means one built from the manager's
	// config; tests pass a fake.
	APIClient kubernetes.Interface
	// Liveness returns the planner's verdicts (rescue.Snapshot.Verdicts,
	// Judge.Assess) and when they may change with no new event (a
	// report ages out, a Lease goes stale): the reconciler looks again
	// then. nil means verdicts from this reconciler's own
	// liveness.Tracker and no reports: the clocks are still rebound's
	// own, never a kubelet's.
	Liveness func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment
	// Recheck is the same judge asked again right before a two-plane
	// delete (Judge.Peek): the verdicts Liveness would give, with nothing
	// recorded. nil means Liveness.
	Recheck func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment
	// WatchReports starts a pass when an agent's PeeringReport says
	// something new (a gossip watcher's vote, a session's state): set it
	// when Liveness reads the reports.
	WatchReports bool
	// LeaseRenewTimes reads every node's Lease renewTime
	// (rescue.Snapshot.LeaseRenewTimes, CachedLeaseRenewTimes): with the
	// Lease plane only. nil means no two-plane action is planned.
	LeaseRenewTimes func(ctx context.Context) (map[string]time.Time, error)
}

// DefaultStopSwitch is the stop switch ConfigMap's default name (in the
// controller's namespace); deploy/rbac grants get on this name only.
const DefaultStopSwitch = "rebound-stop"

// eventComponent names rebound controller in its Events.
const eventComponent = "rebound.dev/controller"

// recoveryKey is the one key the recovery controller reconciles: every
// decision depends on the whole cluster (zone states, limits), so any
// change enqueues the same request and the work queue collapses bursts.
var recoveryKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "cluster"}}

// RecoveryReconciler finds critical pods stranded on NotReady nodes and
// rescues them: snapshot, rescue.PlanFor, apply, requeue at NextCheck.
type RecoveryReconciler struct {
	client client.Client // the caches, and status patches
	reader client.Reader // uncached, for the stop switch
	exec   *execute.Executor
	opts   RecoveryOptions
	clock  clock.PassiveClock

	mu             sync.Mutex
	prevZones      zone.Cluster
	prevDisruption rescue.Disruption
	announced      map[string]bool            // dry-run and stopped actions already logged
	blocked        map[string]rescue.Decision // pod UID -> NoTarget/Held already reported
	usage          *usageIndex                // pods' requests per node; nil: read the pods
	ledger         []rescue.LedgerEntry       // real actions of the last minute
	ledgerSince    time.Time                  // the first pass: the ledger is whole from then on
	written        map[string]statusWrite     // policy name -> this process's last status write
	statusPending  bool                       // a pass left a status change for later (statusMinInterval)
}

// SetupRecovery registers the recovery controller with the manager.
func SetupRecovery(mgr ctrl.Manager, opts RecoveryOptions) error {
	if err := opts.ZoneConfig.Validate(); err != nil {
		return err
	}
	if opts.APIClient == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("API client for the recovery controller: %w", err)
		}
		opts.APIClient = cs
	}
	if opts.Liveness == nil {
		j := NewJudge(nil, nil, nil, nil, nil, liveness.Options{})
		opts.Liveness, opts.Recheck = j.Assess, j.Peek
	}
	r := newRecoveryReconciler(mgr.GetClient(), mgr.GetAPIReader(), opts)
	podInformer, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer for the usage index: %w", err)
	}
	if r.usage, err = newUsageIndex(podInformer); err != nil {
		return err
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{recoveryKey}
	})
	if err := indexPodsByNode(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	// Predicates (cache.go) keep heartbeats and healthy pods' churn from
	// starting passes.
	b := ctrl.NewControllerManagedBy(mgr).Named("recovery")
	for _, obj := range watchedObjects() {
		pred := trimmedChange()
		switch obj.(type) {
		case *corev1.Node:
			pred = nodePredicate()
		case *corev1.Pod:
			pred = podPredicate(cachedNodeNotReady(mgr.GetCache()))
		case *appsv1.ReplicaSet, *appsv1.Deployment:
			pred = ownerPredicate(anyNodeNotReady(mgr.GetCache()))
		}
		b = b.Watches(obj, all, builder.WithPredicates(countTriggers(obj, pred)))
	}
	if opts.WatchReports {
		b = b.Watches(&v1alpha1.PeeringReport{}, all, builder.WithPredicates(countTriggers(&v1alpha1.PeeringReport{}, reportContentChanged())))
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: 1}).Complete(r)
}

// watchedObjects are the kinds the recovery controller watches and lists
// from its cache: everything rescue.Snapshot holds. Node changes re-plan at
// once, which is how a NoTarget pod is re-checked when a node is uncordoned
// or becomes Ready. (rbac_test.go derives the list/watch grants from it.)
func watchedObjects() []client.Object {
	return []client.Object{
		&v1alpha1.RecoveryPolicy{},
		&corev1.Node{},
		&corev1.Pod{},
		&corev1.Namespace{},
		&corev1.PersistentVolumeClaim{},
		&appsv1.ReplicaSet{},
		&appsv1.Deployment{},
	}
}

func newRecoveryReconciler(c client.Client, reader client.Reader, opts RecoveryOptions) *RecoveryReconciler {
	r := &RecoveryReconciler{
		client:    c,
		reader:    reader,
		opts:      opts,
		clock:     opts.Clock,
		announced: map[string]bool{},
		blocked:   map[string]rescue.Decision{},
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.exec = &execute.Executor{Client: opts.APIClient, Component: eventComponent, Now: r.clock.Now}
	if opts.Liveness != nil {
		r.exec.Verdict = r.currentVerdict
	}
	return r
}

// Reconcile plans from the caches and applies the plan. It is
// level-triggered: after a restart it recomputes the same plan, and every
// action it already took shows in the cluster (a terminating pod, a
// scale-bounce annotation), so nothing is repeated. A cache that has not
// caught up yet (its watches broke on an apiserver or etcd restart) can
// plan an action again; the executor's preconditions (the object's UID
// and resourceVersion) refuse it at the API.
func (r *RecoveryReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	start := r.clock.Now()
	snap, verdictsChange, err := r.snapshot(ctx, start)
	if err != nil {
		return afterError(log, ctrl.Result{}, fmt.Errorf("snapshot: %w", err))
	}
	plan := rescue.PlanFor(snap)
	if r.opts.FencingTargets != nil {
		r.opts.FencingTargets.Set(plan.Fencing)
	}
	planSeconds.Observe(r.clock.Since(start).Seconds())
	r.mu.Lock()
	r.prevZones = plan.Zones
	r.prevDisruption = plan.Disruption
	r.mu.Unlock()
	observePlan(plan)
	for _, w := range plan.Warnings {
		log.Info("warning", "detail", w)
	}
	r.reportBlocked(ctx, log, plan)

	var errs []error
	stopped, stopErr := r.stopSwitchPulled(ctx)
	if stopErr != nil {
		// Unknown means stopped: acting while the switch may be pulled is
		// the one thing the switch must prevent.
		log.Error(stopErr, "stop switch unreadable: taking no action")
		errs = append(errs, stopErr)
		stopped = true
	}
	owners := plan.Workloads()
	records := map[string][]v1alpha1.ActionRecord{}
	var toAct []rescue.Action
	for _, a := range plan.Actions {
		why := ""
		switch {
		case stopErr != nil:
			why = "the stop switch cannot be read"
		case stopped:
			why = fmt.Sprintf("stop switch ConfigMap %s exists", r.opts.StopSwitch)
		case r.opts.DryRun:
			why = "controller runs with --dry-run"
		case a.DryRun:
			why = "policy " + a.Policy + " has dryRun: true"
		}
		if why != "" {
			r.announce(ctx, log, a, owners, why)
			continue
		}
		toAct = append(toAct, a)
	}
	actErrs, acted, events := r.actAll(ctx, log, toAct, owners, records) // recovery_parallel.go
	errs = append(errs, actErrs...)
	// The Events and the status writes are independent of each other:
	// made side by side, the pass ends (and the next deadline's pass can
	// start) one round trip sooner.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		inParallel(len(events), func(i int) { events[i]() })
	}()
	if err := r.updateStatuses(ctx, log, snap.Policies, plan, records); err != nil {
		errs = append(errs, err)
	}
	wg.Wait()
	return r.requeue(plan, verdictsChange, acted, len(errs) > 0), nil
}

// requeue picks the next pass: the plan's next check; soon after an
// action, to verify its effect (watches usually get there first); and
// after an error at most retryAfterError later. Errors are logged where
// they happen and never returned, so that controller-runtime's
// exponential backoff cannot postpone the plan's next check.
func (r *RecoveryReconciler) requeue(plan rescue.Plan, verdictsChange time.Time, acted, failed bool) ctrl.Result {
	res := nextPass(r.clock.Now(), plan.NextCheck, verdictsChange, acted, failed)
	if r.takeStatusPending() && (res.RequeueAfter == 0 || res.RequeueAfter > statusMinInterval) {
		res.RequeueAfter = statusMinInterval
	}
	return res
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
	rescuesTotal.WithLabelValues(string(a.Kind), "DryRun").Inc()
	log.Info("rescue action not taken", "why", why, "action", a.Kind, "object", a.Namespace+"/"+a.Name, "reason", a.Reason)
	if err := r.exec.Event(ctx, a, owners[a.Namespace+"/"+a.Pod], corev1.EventTypeNormal, execute.ReasonDryRun, fmt.Sprintf("would %s (%s): %s", a.Kind, why, a.Reason)); err != nil {
		log.Error(err, "Event not recorded", "action", a.Kind, "object", a.Namespace+"/"+a.Name)
	}
}
