package agent

// Untaint: the fail-open half of rebound's taint that needs no controller
// (every gossiping agent, --untaint-after).
//
// The controller marks a node dead on both planes with
// rebound.dev/unreachable:NoSchedule (pkg/unreachable) and takes the mark
// off a node the API has Ready the moment its verdict is not Dead: a
// renewal of the node's Lease ends that verdict, and the controller
// watches the Leases of marked nodes. (On a NotReady node the mark stays:
// upstream's own NoSchedule taint keeps pods off it there, and the mark
// dates the incident.) A controller scaled to 0, crashlooping or
// uninstalled takes nothing off, and a node back, Ready and renewing its
// Lease would stay unschedulable, which upstream never makes it. So the
// node's own agent watches its Node and its Lease and, once its node is
// Ready and it has seen the Lease renewed with the taint on, and the taint
// is still there --untaint-after later with the Lease still renewing, it
// takes it off, as the controller would have (a Ready node whose Lease
// renews is never Dead). "Renews" is the controller's own rule
// (liveness.Lease.StaleAt: the renew interval, a quarter of the Lease's
// duration, plus liveness.DefaultLeaseMargin), not the Lease's whole
// duration: a kubelet that stopped renewing 12 s ago is stale to both.
// They can still disagree for a moment: the agent cannot know a
// controller's non-default --lease-margin, and its watch and the
// controller's deliver a renewal at slightly different moments; the
// agent only acts --untaint-after past the controller's chance. Every time is
// on the agent's own clock: the taint's timeAdded (the controller's
// clock) is never compared with it, so a skewed clock can neither hurry
// nor hold the removal.
//
// Least privilege: RBAC grants get, list, watch and patch on Nodes and
// list and watch on Leases in kube-node-lease; a ValidatingAdmissionPolicy
// (deploy/gossip/admission.yaml, rebound-gossip-untaint-own-node) lets the
// credential make one change only: remove rebound.dev/unreachable:NoSchedule
// from the Node its token is bound to, nothing else in it.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// DefaultUntaintAfter is how long the agent leaves the controller to take
// rebound's taint off its node once the node is Ready and its Lease seen
// renewing. A live controller does it within one pass (it watches the
// Nodes and the Leases of marked nodes: well under a second; a failed
// write is retried within 10 s); a removal by both is harmless (the
// second finds nothing to remove).
const DefaultUntaintAfter = 10 * time.Second

// UntaintFieldManager names the agent's removal in the Node's
// managedFields and the audit log.
const UntaintFieldManager = "rebound-untaint"

// NodeLeaseNamespace holds the kubelets' Leases.
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// defaultLeaseDuration is the kubelet's, for a Lease that names none.
const defaultLeaseDuration = 40 * time.Second

// leaseStaleAt is when the controller's Lease plane calls the node's
// Lease stale without a new renewal: the one rule, liveness.Lease.StaleAt,
// with the controller's default margin.
func leaseStaleAt(lastRenewal time.Time, leaseDuration time.Duration) time.Time {
	return liveness.Lease{RenewSeen: lastRenewal, RenewInterval: liveness.RenewInterval(leaseDuration)}.StaleAt(liveness.DefaultLeaseMargin)
}

// untaintState is what the agent saw of its node, on its own clock.
type untaintState struct {
	// Tainted: the node carries rebound's taint, as last seen; Ready: the
	// API has it Ready.
	Tainted, Ready bool
	// ReadySince is when the agent first saw the node Ready with the
	// taint on; RenewedSince when it first saw the node's Lease renewed
	// with the taint on. Zero until it has.
	ReadySince, RenewedSince time.Time
	// LastRenewal is when it last saw the Lease renewed; LeaseDuration is
	// the Lease's spec.leaseDurationSeconds.
	LastRenewal   time.Time
	LeaseDuration time.Duration
}

// untaintDue says whether the agent takes rebound's taint off its node
// now; if not, when to look again with no new event (zero: only an event
// can change the answer), and why, for the log.
func untaintDue(s untaintState, now time.Time, after time.Duration) (due bool, next time.Time, why string) {
	lease := s.LeaseDuration
	if lease <= 0 {
		lease = defaultLeaseDuration
	}
	start := s.RenewedSince
	if s.ReadySince.After(start) {
		start = s.ReadySince
	}
	switch {
	case !s.Tainted:
		return false, time.Time{}, "no " + unreachable.TaintKey + " taint on the node"
	case !s.Ready || s.ReadySince.IsZero():
		return false, time.Time{}, "the node is NotReady in the API: upstream's own NoSchedule taint keeps new pods off, and the mark dates the incident until it is Ready"
	case s.RenewedSince.IsZero():
		return false, time.Time{}, "the node's Lease not seen renewed since the taint: the controller's verdict may stand"
	case !now.Before(leaseStaleAt(s.LastRenewal, lease)):
		return false, time.Time{}, fmt.Sprintf("the node's Lease not renewed for %s: stale by the controller's rule (its renew interval %s plus the margin %s)",
			now.Sub(s.LastRenewal).Round(time.Millisecond), liveness.RenewInterval(lease), liveness.DefaultLeaseMargin)
	case now.Before(start.Add(after)):
		return false, start.Add(after), fmt.Sprintf("the node is Ready and its Lease renews since %s; the controller has until %s to take the taint off", start.Format(time.RFC3339), start.Add(after).Format(time.RFC3339))
	}
	return true, time.Time{}, fmt.Sprintf("the node is Ready, its Lease renews (seen since %s, last %s ago) and %s is still on after %s: no controller took it off",
		s.RenewedSince.Format(time.RFC3339), now.Sub(s.LastRenewal).Round(time.Millisecond), unreachable.TaintKey, after)
}

// Untainter takes rebound's taint off its own node when no controller
// does (see above).
type Untainter struct {
	node   string
	client kubernetes.Interface
	log    *slog.Logger
	clock  clock.WithTicker
	after  time.Duration
	// First and longest wait before retrying a failed patch.
	retry, maxRetry time.Duration

	trigger chan struct{}

	mu        sync.Mutex
	state     untaintState
	uid       types.UID
	lastRenew *metav1.MicroTime // the renewTime last seen
	synced    bool
	removals  int
	lastErr   string
	passes    int // evaluations of the rule, for tests
}

// NewUntainter builds the untainter of opts.NodeName from the agent's
// options (Client, Clock, Logger, UntaintAfter, RetryInterval,
// MaxRetryInterval).
func NewUntainter(opts Options) *Untainter {
	opts = opts.WithDefaults()
	after := opts.UntaintAfter
	if after <= 0 {
		after = DefaultUntaintAfter
	}
	return &Untainter{
		node: opts.NodeName, client: opts.Client, log: opts.Logger.With("node", opts.NodeName, "part", "untaint"), clock: opts.Clock,
		after: after, retry: opts.RetryInterval, maxRetry: opts.MaxRetryInterval,
		trigger: make(chan struct{}, 1),
	}
}

// Removals is how many times this untainter took the taint off.
func (u *Untainter) Removals() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.removals
}

// LastError is the last failed removal's error, "" after a success.
func (u *Untainter) LastError() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lastErr
}

// Synced reports whether the watches on the node and its Lease have
// synced.
func (u *Untainter) Synced() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.synced
}

// Run watches this node's Node and Lease until ctx ends. It returns nil
// when ctx ends, and an error only when the watches cannot start.
func (u *Untainter) Run(ctx context.Context) error {
	// One object each: field selectors on the name (RBAC cannot narrow
	// list and watch to the node the token is bound to; reading is
	// harmless).
	byName := informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", u.node).String()
	})
	nodes := informers.NewSharedInformerFactoryWithOptions(u.client, 0, byName)
	leases := informers.NewSharedInformerFactoryWithOptions(u.client, 0, byName, informers.WithNamespace(NodeLeaseNamespace))
	if _, err := nodes.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { u.sawNode(o) },
		UpdateFunc: func(_, o any) { u.sawNode(o) },
	}); err != nil {
		return err
	}
	if _, err := leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { u.sawLease(o, false) },
		UpdateFunc: func(_, o any) { u.sawLease(o, true) },
	}); err != nil {
		return err
	}
	ictx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); nodes.Shutdown(); leases.Shutdown() }()
	nodes.Start(ictx.Done())
	leases.Start(ictx.Done())
	for _, f := range []informers.SharedInformerFactory{nodes, leases} {
		for typ, ok := range f.WaitForCacheSync(ictx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("rebound agent: cache of %v did not sync", typ)
			}
		}
	}
	u.mu.Lock()
	u.synced = true
	u.mu.Unlock()
	u.log.Info("watching this node and its Lease to take "+unreachable.TaintKey+" off when no controller does", "after", u.after)

	var wake clock.Timer
	delay := time.Duration(0)
	var retryAt time.Time
	defer func() {
		if wake != nil {
			wake.Stop()
		}
	}()
	for {
		var wakeC <-chan time.Time
		if wake != nil {
			wakeC = wake.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-u.trigger:
		case <-wakeC:
			wake = nil
		}
		now := u.clock.Now()
		u.mu.Lock()
		s, uid := u.state, u.uid
		u.mu.Unlock()
		due, next, why := untaintDue(s, now, u.after)
		if due && now.Before(retryAt) {
			due, next = false, retryAt
		}
		if due {
			if err := u.remove(ctx, uid, why); err != nil {
				delay = min(max(2*delay, u.retry), u.maxRetry)
				retryAt = now.Add(delay)
				next = retryAt
				u.log.Error("cannot take "+unreachable.TaintKey+" off this node", "error", err, "retryIn", delay)
			} else {
				delay, retryAt = 0, time.Time{}
			}
		} else {
			u.log.Debug("taint stays", "why", why)
		}
		if !next.IsZero() {
			if wake != nil {
				wake.Stop()
			}
			// From the clock as it is now: the pass took time.
			if d := next.Sub(u.clock.Now()); d > 0 {
				wake = u.clock.NewTimer(d)
			} else {
				wake = nil
				u.kick()
			}
		}
		u.mu.Lock()
		u.passes++
		u.mu.Unlock()
	}
}

// remove takes the taint off through the one writer of rebound's taint.
func (u *Untainter) remove(ctx context.Context, uid types.UID, why string) error {
	w, err := unreachable.ChangeTaint(ctx, u.client.CoreV1().Nodes(), u.node, uid, nil, UntaintFieldManager)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		u.lastErr = err.Error()
		return err
	}
	u.lastErr = ""
	if w == unreachable.TaintWritten {
		u.removals++
		u.log.Info("took "+unreachable.TaintKey+" off this node", "why", why)
		// The watch brings the node without it; until then the cache
		// still shows it, and it must not be removed twice.
		u.state.Tainted, u.state.RenewedSince, u.state.ReadySince = false, time.Time{}, time.Time{}
	}
	return nil
}

// sawNode records whether the node carries rebound's taint and is
// Ready.
func (u *Untainter) sawNode(o any) {
	n, ok := o.(*corev1.Node)
	if !ok || n.Name != u.node {
		return
	}
	now := u.clock.Now()
	tainted, ready := unreachable.Tainted(n) != nil, kubestatus.NodeReady(n)
	u.mu.Lock()
	u.uid = n.UID
	if !tainted {
		u.state.RenewedSince = time.Time{}
	}
	switch {
	case !tainted || !ready:
		u.state.ReadySince = time.Time{}
	case u.state.ReadySince.IsZero():
		u.state.ReadySince = now
	}
	u.state.Tainted, u.state.Ready = tainted, ready
	u.mu.Unlock()
	u.kick()
}

// sawLease records a renewal: a renewTime other than the last one seen,
// in an update the watch delivered (the first listing is no renewal: it
// may be old), timed by the agent's clock.
func (u *Untainter) sawLease(o any, update bool) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok || l.Name != u.node {
		return
	}
	now := u.clock.Now()
	u.mu.Lock()
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		u.state.LeaseDuration = time.Duration(*d) * time.Second
	}
	renewed := update && l.Spec.RenewTime != nil && (u.lastRenew == nil || !l.Spec.RenewTime.Equal(u.lastRenew))
	if l.Spec.RenewTime != nil {
		u.lastRenew = l.Spec.RenewTime.DeepCopy()
	}
	if renewed {
		u.state.LastRenewal = now
		if u.state.Tainted && u.state.RenewedSince.IsZero() {
			u.state.RenewedSince = now
		}
	}
	u.mu.Unlock()
	if renewed {
		u.kick()
	}
}

func (u *Untainter) kick() {
	select {
	case u.trigger <- struct{}{}:
	default:
	}
}
