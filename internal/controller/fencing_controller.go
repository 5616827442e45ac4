package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"rebound/api/v1alpha1"
	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
	"rebound/pkg/rescue/execute"
)

// DefaultFencingDocument is the ConfigMap, in the controller's namespace,
// that carries the fencing document for the agents.
const DefaultFencingDocument = fencing.DefaultDocumentName

// Events of the fencing reconciler.
const (
	reasonFencingTainted   = "FencingTainted"
	reasonFencingVerified  = "FencingVerified"
	reasonFencingUntainted = "FencingUntainted"
	reasonFencingHeld      = "FencingHeld"
	reasonFencingFailed    = "FencingFailed"
)

// FencingOptions configure the reconciler that fences nodes itself
// (fencing mode Watchdog, docs/fencing.md).
type FencingOptions struct {
	// Liveness returns the judge's verdicts (Judge.Assess): a node is
	// fenced only when dead on both planes.
	Liveness func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment
	// Targets carries the recovery plan's fencing targets.
	Targets *FencingTargets
	// Document is the ConfigMap the fencing document is published in.
	Document types.NamespacedName
	// Fencer tunes the rule; the zero value means its defaults.
	Fencer fencing.FencerOptions
	// DryRun: decide and log, change nothing but rebound's own taint
	// coming off. StopSwitch: while the ConfigMap exists, no taint.
	DryRun     bool
	StopSwitch types.NamespacedName
	// Clock is injected for tests; nil means the real clock. Its readings
	// are used only as differences (the controller's own monotonic clock).
	Clock clock.PassiveClock
	// APIClient reads by quorum and writes; nil means one built from the
	// manager's config.
	APIClient kubernetes.Interface
}

// FencingTargets carries the recovery reconciler's latest
// Plan.Fencing to the fencing reconciler, and wakes it when it changes.
type FencingTargets struct {
	mu      sync.Mutex
	targets []rescue.FencingTarget
	events  chan event.GenericEvent
}

// NewFencingTargets returns an empty set.
func NewFencingTargets() *FencingTargets {
	return &FencingTargets{events: make(chan event.GenericEvent, 1)}
}

// Set records the plan's targets; a change wakes the fencing reconciler.
func (t *FencingTargets) Set(ts []rescue.FencingTarget) {
	t.mu.Lock()
	changed := !slices.Equal(t.targets, ts)
	t.targets = slices.Clone(ts)
	t.mu.Unlock()
	if changed {
		select {
		case t.events <- event.GenericEvent{Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fencing"}}}:
		default:
		}
	}
}

// Get returns the latest targets.
func (t *FencingTargets) Get() []rescue.FencingTarget {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.targets)
}

var fencingKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "fencing"}}

// FencingReconciler runs one fencing.Fencer per target node: it reads
// by quorum what the rule compares, publishes the rounds and the member
// list, and applies the rule's steps to the Node. The pods are
// force-deleted by the recovery reconciler's executor, once the taint is
// verified (rescue.Fenced).
type FencingReconciler struct {
	cache  client.Client
	reader client.Reader // uncached: PeeringReports by quorum, the stop switch
	api    kubernetes.Interface
	events *execute.Executor
	opts   FencingOptions
	clock  clock.PassiveClock
	start  time.Time

	mu      sync.Mutex
	fencers map[string]*fencing.Fencer
	doc     fencing.Document
	logged  map[string]string
}

// SetupFencing registers the reconciler.
func SetupFencing(mgr ctrl.Manager, opts FencingOptions) error {
	if opts.APIClient == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("API client for the fencing controller: %w", err)
		}
		opts.APIClient = cs
	}
	r := newFencingReconciler(mgr.GetClient(), mgr.GetAPIReader(), opts)
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{fencingKey}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("fencing").
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodePredicate())).
		Watches(&v1alpha1.PeeringReport{}, all, builder.WithPredicates(reportContentChanged())).
		WatchesRawSource(source.Channel(opts.Targets.events, all)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

func newFencingReconciler(c client.Client, reader client.Reader, opts FencingOptions) *FencingReconciler {
	r := &FencingReconciler{cache: c, reader: reader, api: opts.APIClient, opts: opts, clock: opts.Clock,
		fencers: map[string]*fencing.Fencer{}, logged: map[string]string{}}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.opts.Targets == nil {
		r.opts.Targets = NewFencingTargets()
	}
	r.start = r.clock.Now()
	r.events = &execute.Executor{Client: opts.APIClient, Component: eventComponent, Now: r.clock.Now}
	return r
}

// Reconcile steps every target's Fencer once.
func (r *FencingReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	now := r.clock.Now()
	mono := now.Sub(r.start)
	var nodes corev1.NodeList
	if err := r.cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return afterError(log, ctrl.Result{}, fmt.Errorf("list nodes: %w", err))
	}
	var reports v1alpha1.PeeringReportList
	if err := r.reader.List(ctx, &reports); err != nil {
		return afterError(log, ctrl.Result{}, fmt.Errorf("list PeeringReports: %w", err))
	}
	var assessment liveness.Assessment
	if r.opts.Liveness != nil {
		assessment = r.opts.Liveness(ctx, pointers(nodes.Items), now)
	}
	stopped, stopErr := readStopSwitch(ctx, r.reader, r.opts.StopSwitch)
	if stopErr != nil {
		log.Error(stopErr, "stop switch unreadable: fencing nothing")
		stopped = true
	}

	due := map[string]bool{}
	for _, t := range r.opts.Targets.Get() {
		due[t.Node] = t.Due
	}
	var members []string
	for _, rep := range reports.Items {
		if rep.Fencing != nil {
			members = append(members, rep.Name)
		}
	}
	renewing := func(m string) bool {
		v := assessment.Of(m)
		return v.Verdict == liveness.Alive && !v.LeaseRenewSeen.IsZero() && !v.LeaseStale
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	var next time.Duration
	wake := func(at time.Duration) {
		if at > 0 && (next == 0 || at < next) {
			next = at
		}
	}
	var rounds []fencing.RoundRequest
	for i := range nodes.Items {
		n := &nodes.Items[i]
		_, target := due[n.Name]
		ours := n.Annotations[fencing.AnnotationFencedBoot] != ""
		if !target && !ours {
			if f := r.fencers[n.Name]; f != nil {
				f.Reset()
				delete(r.fencers, n.Name)
			}
			continue
		}
		f := r.fencers[n.Name]
		if f == nil {
			f = fencing.NewFencer(n.Name, r.opts.Fencer)
			r.fencers[n.Name] = f
		}
		in, err := r.input(ctx, n.Name, reports.Items, assessment, renewing, mono)
		if err != nil {
			log.Error(err, "fencing: quorum read failed", "node", n.Name)
		}
		step := f.Step(in)
		if step.Action == fencing.Taint && !due[n.Name] {
			step = fencing.Step{Action: fencing.Hold, Round: step.Round, Reason: "proven, but no stateful pod's maxUnavailableTime has run out yet"}
		}
		if step.Action == fencing.Taint && (stopped || r.opts.DryRun) {
			step = fencing.Step{Action: fencing.Hold, Round: step.Round, Reason: "proven, but the stop switch is pulled or the controller runs with --dry-run"}
		}
		r.apply(ctx, log, f, n.Name, step, now)
		if step.Action == fencing.PublishRound {
			rounds = append(rounds, fencing.RoundRequest{Node: n.Name, Round: step.Round})
			wake(mono + time.Second)
		} else if id, asking := f.Asking(); asking {
			rounds = append(rounds, fencing.RoundRequest{Node: n.Name, Round: id})
			wake(mono + time.Second)
		}
		wake(step.NextCheck)
		if step.Action == fencing.Taint || step.Action == fencing.DeletePods {
			wake(mono + time.Millisecond)
		}
	}
	for name := range r.fencers {
		if slices.IndexFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == name }) < 0 {
			delete(r.fencers, name)
		}
	}
	if len(members) == 0 && len(rounds) == 0 && r.doc.List.Number == 0 {
		// No agent runs with a watchdog: nothing to publish, and no
		// ConfigMap written in a cluster that does not fence.
	} else if err := r.publish(ctx, members, rounds); err != nil {
		log.Error(err, "fencing: publish the document")
		wake(mono + time.Second)
	} else {
		for _, rd := range rounds {
			r.fencers[rd.Node].Published(rd.Round)
		}
	}
	if next == 0 {
		return ctrl.Result{}, nil
	}
	// Each node's rule ran on the clock after its own reads: count the
	// wait from the end of the pass.
	return ctrl.Result{RequeueAfter: max(next-r.clock.Now().Sub(r.start), time.Millisecond)}, nil
}

// input reads by quorum what the node's Fencer compares.
func (r *FencingReconciler) input(ctx context.Context, name string, reports []v1alpha1.PeeringReport, a liveness.Assessment, renewing func(string) bool, mono time.Duration) (fencing.Input, error) {
	v := a.Of(name)
	in := fencing.Input{Now: mono, Dead: v.Verdict == liveness.Dead && !v.DetectedAt.IsZero(),
		Testimonies: fencing.TestimoniesAbout(name, reports, renewing)}
	node, err := r.api.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return in, err
	}
	lease, err := r.api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return in, err
	}
	// The rule's t is the time of this read: taken after its answer, so
	// that no delay before the GET (a slow apiserver, the other targets'
	// reads) comes off the wait.
	in.Now = r.clock.Now().Sub(r.start)
	read := fencing.Observation{LeaseVersion: lease.ResourceVersion, BootID: node.Status.NodeInfo.BootID}
	if i := slices.IndexFunc(reports, func(p v1alpha1.PeeringReport) bool { return p.Name == name }); i >= 0 {
		read.Report = fencing.ReportFromAPI(reports[i].ResourceVersion, reports[i].Fencing)
	}
	in.Read = &read
	in.Ready = readyOf(node).Status == corev1.ConditionTrue
	if t := outOfServiceTaint(node); t != nil {
		in.FencedBoot = node.Annotations[fencing.AnnotationFencedBoot]
		pods, err := r.api.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
		if err != nil {
			in.Read = nil
			return in, err
		}
		for _, p := range pods.Items {
			// A pod that tolerates the taint (a node agent's DaemonSet
			// pod) is run by the node's next boot whether the taint is on
			// or not, so the taint never kept it off; and while its object
			// exists and is not being deleted, no replacement of it can
			// (a StatefulSet needs the name free, a ReplicaSet replaces
			// only a pod that is going). Only the pods the taint is for
			// must be gone.
			if (t.TimeAdded == nil || p.CreationTimestamp.Time.Before(t.TimeAdded.Time)) && !toleratesTaint(&p, t) {
				in.OldPods++
			}
		}
	}
	return in, nil
}

func toleratesTaint(p *corev1.Pod, t *corev1.Taint) bool {
	return slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(logr.Discard(), t, false) })
}

func outOfServiceTaint(n *corev1.Node) *corev1.Taint {
	for i := range n.Spec.Taints {
		if rescue.IsFencingTaint(&n.Spec.Taints[i]) {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// apply carries out one step on the Node; the Fencer is told only of
// writes that took effect.
func (r *FencingReconciler) apply(ctx context.Context, log logr.Logger, f *fencing.Fencer, name string, step fencing.Step, now time.Time) {
	var err error
	switch step.Action {
	case fencing.Hold, fencing.PublishRound:
		if r.logged[name] != step.Reason {
			r.logged[name] = step.Reason
			log.Info("fencing", "node", name, "step", step.Action, "round", step.Round, "reason", step.Reason)
		}
		return
	case fencing.Taint:
		err = r.changeNode(ctx, name, func(n *corev1.Node) {
			t := metav1.NewTime(now.Truncate(time.Second))
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: fencing.OutOfServiceValue, Effect: corev1.TaintEffectNoExecute, TimeAdded: &t})
			setAnnotation(n, fencing.AnnotationFencedBoot, step.BootID)
		})
		if err == nil {
			f.Tainted(step.Round)
		}
	case fencing.DeletePods:
		err = r.changeNode(ctx, name, func(n *corev1.Node) { setAnnotation(n, fencing.AnnotationVerified, step.Round) })
		if err == nil {
			f.Deleted(step.Round)
		}
	case fencing.Untaint:
		err = r.changeNode(ctx, name, func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return rescue.IsFencingTaint(&t) })
			delete(n.Annotations, fencing.AnnotationFencedBoot)
			delete(n.Annotations, fencing.AnnotationVerified)
		})
	}
	fencingSteps.WithLabelValues(string(step.Action), resultOf(err)).Inc()
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name}
	reason, kind := map[fencing.Action]string{fencing.Taint: reasonFencingTainted, fencing.DeletePods: reasonFencingVerified, fencing.Untaint: reasonFencingUntainted}[step.Action], corev1.EventTypeWarning
	if step.Action == fencing.Untaint {
		kind = corev1.EventTypeNormal
	}
	note := step.Reason
	if err != nil {
		reason, note = reasonFencingFailed, fmt.Sprintf("%s failed: %v; %s", step.Action, err, step.Reason)
		log.Error(err, "fencing step failed", "node", name, "step", step.Action, "round", step.Round)
	} else {
		log.Info("fencing", "node", name, "step", step.Action, "round", step.Round, "reason", step.Reason)
	}
	if eerr := r.events.EventAbout(ctx, ref, nil, string(step.Action), kind, reason, note); eerr != nil {
		log.Error(eerr, "Event not recorded", "node", name, "reason", reason)
	}
}

func resultOf(err error) string {
	if err != nil {
		return resultFailed
	}
	return resultSucceeded
}

func setAnnotation(n *corev1.Node, key, value string) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[key] = value
}

// changeNode writes a change to the Node read by quorum just now: its
// whole taint list and the fencing annotations, as a merge patch that
// carries the resourceVersion read, so that a Node that changed since is
// not written over; the next pass reads and decides again.
func (r *FencingReconciler) changeNode(ctx context.Context, name string, change func(*corev1.Node)) error {
	n, err := r.api.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	before := maps.Clone(n.Annotations)
	change(n)
	annotations := map[string]*string{}
	for _, k := range []string{fencing.AnnotationFencedBoot, fencing.AnnotationVerified} {
		v, now := n.Annotations[k]
		old, was := before[k]
		switch {
		case now && (!was || old != v):
			annotations[k] = &v
		case !now && was:
			annotations[k] = nil
		}
	}
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": annotations},
		"spec":     map[string]any{"taints": n.Spec.Taints},
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = r.api.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: "rebound-fencing"})
	return err
}

// publish writes the document when it changed.
func (r *FencingReconciler) publish(ctx context.Context, members []string, rounds []fencing.RoundRequest) error {
	key := r.opts.Document
	cms := r.api.CoreV1().ConfigMaps(key.Namespace)
	cm, err := cms.Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	prev := r.doc
	if err == nil {
		if d, perr := fencing.ParseDocument([]byte(cm.Data[fencing.DocumentKey])); perr == nil {
			prev = d
		}
	}
	next := fencing.NextDocument(prev, members, rounds)
	data, eerr := next.Encode()
	if eerr != nil {
		return eerr
	}
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "rebound"}}, Data: map[string]string{fencing.DocumentKey: string(data)}}, metav1.CreateOptions{})
	case cm.Data[fencing.DocumentKey] == string(data):
		err = nil
	default:
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[fencing.DocumentKey] = string(data)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err == nil {
		r.doc = next
	}
	return err
}

var fencingSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rebound_fencing_steps_total",
	Help: "The fencing reconciler's writes to Nodes, by step (Taint, DeletePods: the verification that lets the pods go, Untaint) and result (Succeeded, Failed).",
}, []string{"step", "result"})

func init() { metrics.Registry.MustRegister(fencingSteps) }
