// Package execute carries out pkg/rescue's actions against the API: the one
// executor of rescue actions, used by `rebound controller` and by `rebound
// restore bringup`. It owns the preconditions checked at the moment of the
// write, the results as the API spells them (rescue.ResultSucceeded...),
// and the Events; status records (rescue.Action.Record,
// rescue.PrependRecords) are pure and live with the planner.
//
// Every read here goes to the API server, never to an informer cache: every
// delete re-reads the node (once per pass and node for a pass's deletes
// applied together, Executor.Pass) and refuses if it is Ready now, or no longer
// carries the taint that keeps the replacement off it (or, for an
// action a two-plane verdict decided, if the node's Lease was renewed
// since, its rebound.dev/unreachable mark is gone, or the verdict no
// longer holds), and a force delete also requires the
// out-of-service:NoExecute taint now, not as the cache remembered it; a
// scale action re-reads the
// Deployment and checks its UID, resourceVersion and the bounce rules on
// what the API holds, then writes it with Update, whose resourceVersion the
// API server compares (a conflict means someone changed it since: re-plan).
package execute

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
	"rebound/pkg/unreachable"
)

// Executor applies actions and records Events for them.
type Executor struct {
	// Client must talk to the API server directly (not through a cache).
	Client kubernetes.Interface
	// Component names the caller in Events: reportingController and
	// source.component, e.g. "rebound.dev/controller".
	Component string
	// Instance is the Events' reportingInstance; "" means Component-host.
	Instance string
	// Now is the clock of Event times; nil means time.Now.
	Now func() time.Time
	// Verdict returns the liveness verdict on a node as it stands now,
	// for the actions a two-plane verdict decided (rescue.TwoPlaneCheck);
	// nil refuses every such action, the side of a caller that keeps no
	// Lease plane.
	Verdict func(ctx context.Context, node string) liveness.NodeVerdict

	// reads, when set (Pass), shares the re-reads of a node among the
	// pass's actions on it.
	reads *passReads
}

// Pass returns an executor for the actions of one pass, applied together:
// the re-reads before the deletes (the node, its Lease, the verdict) are
// made once per node, right before the first delete off it, and every
// delete of the pass off that node is checked against them. A node
// running dozens of stranded pods would otherwise be read dozens of times
// in the same moment, and the pass, and every deadline behind it, would
// wait for the API to answer them all. The reads are no older than the
// pass: call Pass again for the next one.
func (e *Executor) Pass() *Executor {
	c := *e
	c.reads = &passReads{}
	return &c
}

// passReads holds one pass's reads, by node: each a future, so that
// concurrent actions on one node wait for the one read in flight.
type passReads struct {
	mu       sync.Mutex
	nodes    map[string]func() nodeRead
	leases   map[string]func() leaseRead
	verdicts map[string]func() liveness.NodeVerdict
}

// shared returns m[key], starting read for it when it is the first.
func shared[T any](mu *sync.Mutex, m *map[string]func() T, key string, read func() T) func() T {
	mu.Lock()
	defer mu.Unlock()
	if f, ok := (*m)[key]; ok {
		return f
	}
	if *m == nil {
		*m = map[string]func() T{}
	}
	f := future(read)
	(*m)[key] = f
	return f
}

// future runs read at once and returns what waits for its result; every
// call returns the same result.
func future[T any](read func() T) func() T {
	var v T
	done := make(chan struct{})
	go func() {
		defer close(done)
		v = read()
	}()
	return func() T {
		<-done
		return v
	}
}

type nodeRead struct {
	n   *corev1.Node
	err error
}

type leaseRead struct {
	l   *coordinationv1.Lease
	err error
}

// getNode reads node from the API, once per pass (Pass).
func (e *Executor) getNode(ctx context.Context, node string) (*corev1.Node, error) {
	read := func() nodeRead {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return nodeRead{n, err}
	}
	var r nodeRead
	if e.reads == nil {
		r = read()
	} else {
		r = shared(&e.reads.mu, &e.reads.nodes, node, read)()
	}
	return r.n, r.err
}

// verdict asks Verdict about node, once per pass (Pass).
func (e *Executor) verdict(ctx context.Context, node string) liveness.NodeVerdict {
	read := func() liveness.NodeVerdict { return e.Verdict(ctx, node) }
	if e.reads == nil {
		return read()
	}
	return shared(&e.reads.mu, &e.reads.verdicts, node, read)()
}

// Outcome is what one action did.
type Outcome struct {
	// Result is rescue.ResultSucceeded, ResultAlreadyDone, ResultRefused
	// or ResultFailed.
	Result string
	// Detail says what happened, for people.
	Detail string
	// Err is set with ResultFailed.
	Err error
}

// Applied reports whether the action changed the cluster.
func (o Outcome) Applied() bool { return o.Result == rescue.ResultSucceeded }

func (e *Executor) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

// Apply executes one action. Applying the same plan twice changes nothing
// the second time: the preconditions find the change made.
func (e *Executor) Apply(ctx context.Context, a rescue.Action) Outcome {
	switch a.Kind {
	case rescue.ActionDelete:
		if o, ok := e.nodeStillDown(ctx, a, false); !ok {
			return o
		}
		return e.deletePod(ctx, a, nil)
	case rescue.ActionForceDelete:
		if o, ok := e.nodeStillDown(ctx, a, true); !ok {
			return o
		}
		return e.deletePod(ctx, a, ptr.To[int64](0))
	case rescue.ActionScaleDown, rescue.ActionScaleRestore:
		return e.scale(ctx, a)
	}
	return failed(fmt.Errorf("unknown action kind %q", a.Kind))
}

func failed(err error) Outcome {
	return Outcome{Result: rescue.ResultFailed, Detail: err.Error(), Err: err}
}

// nodeStillDown re-reads the pod's node from the API right before any
// delete: the plan may come from an informer cache, or (restore bringup)
// from a status restored from a backup, that still shows the node NotReady
// a moment after it came back. Deleting a pod off a node that is Ready now
// only restarts a pod that was serving, so a Ready node refuses every
// delete. A force delete needs more: the node must still carry the
// out-of-service:NoExecute taint, because a force delete off a live node
// runs two copies of a pod that must run once.
//
// A node gone from the API refuses a force delete (the pod garbage
// collector removes its pods) but not a graceful one: no kubelet can be
// serving the pod there, and the ReplicaSet replaces it as soon as it is
// terminating, before the garbage collector's quarantine ends.
func (e *Executor) nodeStillDown(ctx context.Context, a rescue.Action, force bool) (Outcome, bool) {
	what := "delete"
	if force {
		what = "force delete"
	}
	if a.Node == "" {
		// The planner only deletes pods it found on a NotReady node; an
		// action without one cannot be checked, so it is not applied.
		return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf("the action names no node to re-read before the %s: not deleting", what)}, false
	}
	// The Lease, when the action names one, is read beside the Node, not
	// after it: both reads are of the moment before the delete, and a
	// rescue of hundreds of pods whose deadlines pass together waits for
	// one round trip less each.
	var lease func() (*coordinationv1.Lease, error)
	if a.LeaseRenewTime != nil || a.TwoPlane != nil {
		lease = e.readLease(ctx, a.Node)
	}
	n, err := e.getNode(ctx, a.Node)
	switch {
	case apierrors.IsNotFound(err) && force:
		return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf("node %s is gone from the API; the pod garbage collector removes its pods", a.Node)}, false
	case apierrors.IsNotFound(err) && a.LeaseRenewTime != nil:
		// The Node is gone but its kubelet may still renew its Lease.
		return e.leaseUnchanged(a, lease, *a.LeaseRenewTime, what)
	case apierrors.IsNotFound(err):
		return Outcome{}, true
	case err != nil:
		return failed(fmt.Errorf("re-read node %s before the %s: %w", a.Node, what, err)), false
	}
	if a.TwoPlane != nil {
		if o, ok := e.stillDeadOnTwoPlanes(ctx, a, n, lease, what); !ok {
			return o, false
		}
	} else if kubestatus.NodeReady(n) {
		return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf("node %s, re-read from the API just now, is Ready again: not deleting a pod that may be serving", a.Node)}, false
	} else if a.LeaseRenewTime != nil {
		if o, ok := e.leaseUnchanged(a, lease, *a.LeaseRenewTime, what); !ok {
			return o, false
		}
	}
	if a.KeepsOff != nil && !rescue.KeepsOff(n, a.KeepsOff) {
		// The replacement could land back on the node it is rescued
		// from, and be stranded again the moment it is bound.
		return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf("node %s, re-read from the API just now, no longer carries %s, which the plan counted on to keep the replacement off it: not deleting",
			a.Node, keepsOffWords(a.KeepsOff))}, false
	}
	if !force {
		return Outcome{}, true
	}
	if rescue.Fenced(n) {
		return Outcome{}, true
	}
	return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf("node %s, re-read from the API just now, is not fenced (no %s:NoExecute, or rebound's own not verified yet): not force-deleting",
		a.Node, corev1.TaintNodeOutOfService)}, false
}

// keepsOffWords names the plan's barrier for people.
func keepsOffWords(t *corev1.Taint) string {
	if t.Key == corev1.TaintNodeUnschedulable && t.Effect == corev1.TaintEffectNoSchedule {
		return "its cordon (spec.unschedulable)"
	}
	return "the taint " + t.Key + ":" + string(t.Effect)
}

// leaseUnchanged re-reads the node's Lease before a delete: a renewTime
// other than the one the plan read, whatever time the kubelet's clock
// wrote, means the kubelet reached the API since, a moment before its
// Ready flag says so (at the end of a stall the Lease comes first).
func (e *Executor) leaseUnchanged(a rescue.Action, lease func() (*coordinationv1.Lease, error), planned time.Time, what string) (Outcome, bool) {
	l, err := lease()
	switch {
	case apierrors.IsNotFound(err) && planned.IsZero():
		// The plan found no Lease either.
		return Outcome{}, true
	case apierrors.IsNotFound(err):
		return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf("the Lease of node %s that the plan read is gone from %s: not deleting", a.Node, corev1.NamespaceNodeLease)}, false
	case err != nil:
		return failed(fmt.Errorf("re-read the Lease of node %s before the %s: %w", a.Node, what, err)), false
	}
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	if !renew.Equal(planned) {
		return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf("the Lease of node %s was renewed since the plan (renewTime %s, the plan read %s): its kubelet reaches the API again: not deleting",
			a.Node, renew.UTC().Format(time.RFC3339Nano), planned.UTC().Format(time.RFC3339Nano))}, false
	}
	return Outcome{}, true
}

// stillDeadOnTwoPlanes stands in for "the node is not Ready" when a
// two-plane verdict decided the action: the API may well still have the
// node Ready, for its node grace period has not run out. What the verdict
// rested on must hold now, read from the API: the node still carries
// rebound's taint (pkg/unreachable takes it off the moment the verdict is
// not Dead), its Lease names the renewTime the verdict saw (any renewal
// since, whatever time the kubelet's clock wrote, means the kubelet
// lives), and the verdict asked for now is still Dead on both planes (a
// gossip watcher may have seen the node since).
func (e *Executor) stillDeadOnTwoPlanes(ctx context.Context, a rescue.Action, n *corev1.Node, lease func() (*coordinationv1.Lease, error), what string) (Outcome, bool) {
	refuse := func(format string, args ...any) (Outcome, bool) {
		return Outcome{Result: rescue.ResultRefused, Detail: fmt.Sprintf(format, args...) + ": not deleting"}, false
	}
	l, err := lease()
	if unreachable.Tainted(n) == nil {
		return refuse("node %s, re-read from the API just now, no longer carries %s:NoSchedule (the verdict changed, or someone took the mark off)", a.Node, unreachable.TaintKey)
	}
	switch {
	case apierrors.IsNotFound(err):
		return refuse("node %s has no Lease in %s to re-read", a.Node, corev1.NamespaceNodeLease)
	case err != nil:
		return failed(fmt.Errorf("re-read the Lease of node %s before the %s: %w", a.Node, what, err)), false
	}
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	if !renew.Equal(a.TwoPlane.LeaseRenewTime) {
		return refuse("the Lease of node %s was renewed since the verdict (renewTime %s, the verdict saw %s): its kubelet lives",
			a.Node, renew.UTC().Format(time.RFC3339Nano), a.TwoPlane.LeaseRenewTime.UTC().Format(time.RFC3339Nano))
	}
	if e.Verdict == nil {
		return refuse("this executor has no liveness verdict to re-check the two-plane verdict on node %s with", a.Node)
	}
	if v := e.verdict(ctx, a.Node); v.Verdict != liveness.Dead || v.DetectedAt.IsZero() {
		return refuse("node %s is no longer dead on both planes (verdict %s: %s)", a.Node, v.Verdict, v.Reason)
	}
	return Outcome{}, true
}

// readLease starts a read of node's Lease from the API (once per pass,
// Pass) and returns what waits for its result.
func (e *Executor) readLease(ctx context.Context, node string) func() (*coordinationv1.Lease, error) {
	read := func() leaseRead {
		l, err := e.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		return leaseRead{l, err}
	}
	var f func() leaseRead
	if e.reads == nil {
		f = future(read)
	} else {
		f = shared(&e.reads.mu, &e.reads.leases, node, read)
	}
	return func() (*coordinationv1.Lease, error) {
		r := f()
		return r.l, r.err
	}
}

func (e *Executor) deletePod(ctx context.Context, a rescue.Action, grace *int64) Outcome {
	// The preconditions make the delete act on exactly the pod the plan
	// saw: not on a newer pod of the same name (UID), and not on one that
	// changed since (resourceVersion). The second is what keeps a pass
	// planned from a stale cache (a watch broken by an apiserver or etcd
	// restart) from deleting again a pod it already deleted: that pod is
	// terminating now, so its version moved on.
	opts := metav1.DeleteOptions{GracePeriodSeconds: grace}
	if a.UID != "" || a.ResourceVersion != "" {
		opts.Preconditions = &metav1.Preconditions{}
		if a.UID != "" {
			opts.Preconditions.UID = &a.UID
		}
		if a.ResourceVersion != "" {
			opts.Preconditions.ResourceVersion = &a.ResourceVersion
		}
	}
	err := e.Client.CoreV1().Pods(a.Namespace).Delete(ctx, a.Name, opts)
	switch {
	case err == nil && grace != nil:
		return Outcome{Result: rescue.ResultSucceeded, Detail: "force-deleted (grace period 0)"}
	case err == nil:
		return Outcome{Result: rescue.ResultSucceeded, Detail: "deleted; its ReplicaSet creates a replacement"}
	case apierrors.IsNotFound(err):
		return Outcome{Result: rescue.ResultAlreadyDone, Detail: "already gone"}
	case apierrors.IsConflict(err):
		return Outcome{Result: rescue.ResultAlreadyDone, Detail: "not deleted: the pod changed since it was planned, or a newer pod has its name (UID and resourceVersion preconditions); re-planned"}
	default:
		return failed(fmt.Errorf("delete pod %s/%s: %w", a.Namespace, a.Name, err))
	}
}

// scale is either half of a scale bounce: Get from the API, check and
// change it (rescue.Action.ChangeDeployment), Update. The Update carries
// the object's resourceVersion, which the API server compares; a
// Deployment recreated under the same name has another UID and another
// resourceVersion, both checked before.
func (e *Executor) scale(ctx context.Context, a rescue.Action) Outcome {
	deployments := e.Client.AppsV1().Deployments(a.Namespace)
	d, err := deployments.Get(ctx, a.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Outcome{Result: rescue.ResultAlreadyDone, Detail: "Deployment gone"}
	case err != nil:
		return failed(fmt.Errorf("get Deployment %s/%s: %w", a.Namespace, a.Name, err))
	}
	if result, why := a.ChangeDeployment(d); result != "" {
		return Outcome{Result: result, Detail: why}
	}
	_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
	switch {
	case err == nil && a.Kind == rescue.ActionScaleDown:
		return Outcome{Result: rescue.ResultSucceeded, Detail: fmt.Sprintf("scaled to 0 (annotations %s=%d, %s=%s)",
			rescue.ScaleBounceAnnotation, a.Replicas, rescue.ScaleBouncedForAnnotation, d.Annotations[rescue.ScaleBouncedForAnnotation])}
	case err == nil:
		return Outcome{Result: rescue.ResultSucceeded, Detail: fmt.Sprintf("scaled back to %d", a.Replicas)}
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return Outcome{Result: rescue.ResultAlreadyDone, Detail: "not scaled: the Deployment changed meanwhile; re-planned"}
	default:
		return failed(fmt.Errorf("update Deployment %s/%s: %w", a.Namespace, a.Name, err))
	}
}

// Event reasons besides rescue.ActionKind.EventReason.
const (
	ReasonFailed   = "RescueFailed"
	ReasonRefused  = "RescueRefused"
	ReasonDryRun   = "RescueDryRun"
	ReasonNoTarget = "RescueNoTarget"
	ReasonHeld     = "RescueHeld"
)

// RecordOutcome records the Event an action's outcome calls for: Normal
// with the action's reason when it succeeded, Warning when it failed or a
// precondition refused it, none when it was already done.
func (e *Executor) RecordOutcome(ctx context.Context, a rescue.Action, w rescue.Workload, o Outcome) error {
	switch o.Result {
	case rescue.ResultSucceeded:
		return e.Event(ctx, a, w, corev1.EventTypeNormal, a.Kind.EventReason(), a.Reason)
	case rescue.ResultRefused:
		return e.Event(ctx, a, w, corev1.EventTypeWarning, ReasonRefused, fmt.Sprintf("%s refused: %s; %s", a.Kind, o.Detail, a.Reason))
	case rescue.ResultFailed:
		return e.Event(ctx, a, w, corev1.EventTypeWarning, ReasonFailed, fmt.Sprintf("%s failed: %s; %s", a.Kind, o.Detail, a.Reason))
	}
	return nil
}

// noteMax is the API's limit on an Event's message.
const noteMax = 1024

// Event records an Event about an action, regarding the workload whose
// fate it decides (Regarding), related to the pod. It is a core/v1 Event
// with eventTime, firstTimestamp and lastTimestamp all set, so that
// `kubectl get events --sort-by=.lastTimestamp` (or .eventTime) orders it;
// the events.k8s.io/v1 API would refuse the two timestamps.
func (e *Executor) Event(ctx context.Context, a rescue.Action, w rescue.Workload, eventType, reason, note string) error {
	action := string(a.Kind)
	if action == "" {
		// An Event about a decision not to act (NoTarget, Held); the API
		// requires an action with eventTime.
		action = "Hold"
	}
	regarding := Regarding(a, w)
	return e.EventAbout(ctx, regarding, related(a, regarding), action, eventType, reason, note)
}

// EventAbout records a core/v1 Event regarding any object (the Node
// Events of pkg/unreachable's actions as well as the rescues'), in the
// form Event describes. Events about a cluster-scoped object go to the
// default namespace, as client-go's recorders put them.
func (e *Executor) EventAbout(ctx context.Context, regarding corev1.ObjectReference, rel *corev1.ObjectReference, action, eventType, reason, note string) error {
	now := e.now()
	instance := e.Instance
	if instance == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "unknown"
		}
		instance = rescue.Truncate(e.Component+"-"+host, 128)
	}
	namespace := regarding.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		// Named as client-go's recorders name Events: object, dot, time in
		// hex.
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", regarding.Name, now.UnixNano()), Namespace: namespace},
		InvolvedObject:      regarding,
		Related:             rel,
		Reason:              reason,
		Message:             rescue.Truncate(note, noteMax),
		Type:                eventType,
		Source:              corev1.EventSource{Component: e.Component},
		FirstTimestamp:      metav1.NewTime(now),
		LastTimestamp:       metav1.NewTime(now),
		Count:               1,
		EventTime:           metav1.NewMicroTime(now),
		Action:              action,
		ReportingController: e.Component,
		ReportingInstance:   instance,
	}
	_, err := e.Client.CoreV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// Regarding is the object an action's Event is about: the Deployment a
// scale action changes, else the workload that owns the pod (from the
// plan), else the pod.
func Regarding(a rescue.Action, w rescue.Workload) corev1.ObjectReference {
	if a.Kind == rescue.ActionScaleDown || a.Kind == rescue.ActionScaleRestore {
		return corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: a.Namespace, Name: a.Name, UID: a.UID}
	}
	switch w.Kind {
	case "Deployment", "StatefulSet", "ReplicaSet":
		return corev1.ObjectReference{APIVersion: "apps/v1", Kind: w.Kind, Namespace: a.Namespace, Name: w.Name, UID: w.UID}
	}
	return corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: a.Namespace, Name: a.Name, UID: a.UID}
}

// related is the pod the action is for, when the Event regards another
// object.
func related(a rescue.Action, regarding corev1.ObjectReference) *corev1.ObjectReference {
	if a.Pod == "" || regarding.Kind == "Pod" {
		return nil
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: a.Namespace, Name: a.Pod}
	if a.Kind == rescue.ActionDelete || a.Kind == rescue.ActionForceDelete {
		ref.UID = a.UID
	}
	return ref
}
