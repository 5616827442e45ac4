package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// Options configure a bring-up.
type Options struct {
	Client kubernetes.Interface
	// Reports reads the agents' PeeringReports (a dynamic client), the
	// liveness signal the controller reads besides the Ready conditions
	// and the Leases; nil: none.
	Reports dynamic.Interface
	// Evidence says which reports count, as the controller's
	// --peering-report-max-age and --peering-max-clock-skew; zero: the
	// defaults.
	Evidence liveness.Options
	// Selection names the essential workloads.
	Selection Selection
	// Deadline: zero fields take DefaultDeadline's.
	Deadline Deadline
	// DryRun reads the cluster once, prints the plan and changes nothing.
	DryRun bool
	// WaitOnly waits on the workloads' status exactly like a bring-up but
	// never acts: what a restore without rebound does. The plan is still
	// reported, as what rebound would do.
	WaitOnly bool
	// ReplacementTimeout is how long a deleted pod's replacement may take
	// before the scale bounce; 0 means rescue.DefaultReplacementTimeout.
	ReplacementTimeout time.Duration
	// ZoneConfig is kube-controller-manager's node lifecycle settings, for
	// the zone report; zero means upstream's defaults.
	ZoneConfig zone.Config
	// PollInterval between reads of the cluster; 0 means 1s.
	PollInterval time.Duration
	// Progress receives one line per change, for a person; nil discards.
	Progress io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// StopSwitch is the controller's stop switch ConfigMap (pkg/stopswitch;
	// the CLI's default is rebound-system/rebound-stop); empty Name means
	// none. While it exists the bring-up plans and reports, acts on
	// nothing, and ends with OutcomeStopped (ExitUnsafe).
	StopSwitch types.NamespacedName
	// IgnoreSuspend lets a bring-up act on a policy whose spec.suspend is
	// true; without it such a policy is refused (ExitUnsafe) unless the
	// run acts on nothing anyway (DryRun, WaitOnly).
	IgnoreSuspend bool
	// LeaseObservation bounds how long a node's Lease may take to renew
	// before the node is reported as not seen alive (the bring-up goes on
	// watching it), and how long a dry run watches the Leases before it
	// plans. 0 means half the longest Lease duration of the Ready nodes
	// (two kubelet renewals), within [2s, 60s]; 20s without one.
	LeaseObservation time.Duration
}

// restorePolicyName names the policy Bringup plans with when it is given a
// list of workloads.
const restorePolicyName = "rebound-restore-bringup"

// Bringup brings the essential workloads up: it resolves them (an unknown
// one is bad input, before anything changes), then until every one is
// available, or refused as unsafe, or the deadline passes, it reads the
// cluster, plans with pkg/rescue (maxUnavailableTime 0), applies the
// actions and judges each workload by its status.
//
// Targets come only from nodes seen alive: Ready, and their Lease renewed
// during the bring-up's own observation. A restored cluster replays the
// Ready statuses of its backup, so a dead node looks Ready until the node
// lifecycle controller notices; an action whose replacement could run only
// on such a node waits (see liveTargetsOnly).
//
// The error is for bad input (ExitBadInput), for a suspended policy
// (ExitUnsafe) and for failures before the first read; a bring-up that
// ends in a timeout or a refusal (the stop switch included) returns a
// Result whose Err() carries the exit code.
func Bringup(ctx context.Context, opts Options) (*Result, error) {
	b, err := newBringup(ctx, opts)
	if err != nil {
		return nil, err
	}
	return b.run(ctx)
}

type bringup struct {
	opts     Options
	refs     []WorkloadRef
	policy   *v1alpha1.RecoveryPolicy
	start    time.Time
	deadline time.Time
	beats    *heartbeats
	zones    zone.Cluster
	// disruption carries the full-disruption state from round to round.
	disruption rescue.Disruption
	// liveZones and liveDisruption are the same for the plan of the live
	// nodes only (liveTargetsOnly).
	liveZones      zone.Cluster
	liveDisruption rescue.Disruption
	// firstSeen and leasePlane are the bring-up's own clocks of the
	// liveness model, as the controller keeps them.
	firstSeen  liveness.Tracker
	leasePlane liveness.LeaseTracker
	// observeFor bounds the Lease observation (Options.LeaseObservation),
	// fixed at the first read.
	observeFor time.Duration
	out        *progress
	result     *Result
	availAt    map[WorkloadRef]float64
	planned    map[string]bool // actions listed in a dry run or wait-only
}

func newBringup(ctx context.Context, opts Options) (*bringup, error) {
	if opts.Client == nil {
		return nil, errors.New("restore: no Kubernetes client")
	}
	if opts.Deadline.Base == 0 && opts.Deadline.PerNode == 0 {
		opts.Deadline = DefaultDeadline()
	}
	if err := opts.Deadline.Validate(); err != nil {
		return nil, BadInput(err)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	// The planner's own defaults, set here so that the progress and the
	// result show the values planned with.
	opts.ZoneConfig = opts.ZoneConfig.WithDefaults()
	opts.ReplacementTimeout = rescue.Defaults{ReplacementTimeout: opts.ReplacementTimeout}.WithDefaults().ReplacementTimeout
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	refs, err := Resolve(ctx, opts.Client, opts.Selection)
	if err != nil {
		return nil, err
	}
	if p := opts.Selection.Policy; p != nil && p.Spec.Suspend && !opts.IgnoreSuspend && !opts.DryRun && !opts.WaitOnly && !p.Spec.DryRun {
		return nil, &Error{Code: ExitUnsafe, Err: fmt.Errorf("RecoveryPolicy %s is suspended (spec.suspend: true): restore bringup does not act on it; resume it, or pass --ignore-suspend to act anyway (--dry-run plans without acting); nothing changed", p.Name)}
	}
	policy, err := planningPolicy(opts.Selection.Policy, refs, opts.DryRun)
	if err != nil {
		return nil, err
	}
	b := &bringup{opts: opts, refs: refs, policy: policy, beats: newHeartbeats(), availAt: map[WorkloadRef]float64{}, planned: map[string]bool{}}
	b.start = opts.Now()
	b.out = &progress{w: opts.Progress, start: b.start, now: opts.Now, last: map[string]string{}}
	b.result = &Result{Started: b.start}
	if opts.StopSwitch.Name != "" {
		b.result.StopSwitch = opts.StopSwitch.String()
	}
	if p := opts.Selection.Policy; p != nil && p.Spec.Suspend {
		w := fmt.Sprintf("RecoveryPolicy %s is suspended (spec.suspend: true)", p.Name)
		switch {
		case opts.DryRun || opts.WaitOnly || p.Spec.DryRun:
			w += ": planned as if resumed; a run that acts refuses it unless --ignore-suspend"
		default:
			w += ": acting anyway (--ignore-suspend)"
		}
		b.result.Warnings = append(b.result.Warnings, w)
	}
	return b, nil
}

// planningPolicy is the RecoveryPolicy the planner runs with: the given
// policy's actions, fencing and limits (the defaults without one), its
// critical selector narrowed to the essential workloads' namespaces (the
// snapshot holds only their pods), and maxUnavailableTime 0, because a
// restore is an explicit operator action.
func planningPolicy(base *v1alpha1.RecoveryPolicy, refs []WorkloadRef, dryRun bool) (*v1alpha1.RecoveryPolicy, error) {
	p := &v1alpha1.RecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: restorePolicyName}}
	if base != nil {
		p.Name = base.Name
		p.Spec = *base.Spec.DeepCopy()
		dryRun = dryRun || base.Spec.DryRun
	}
	var namespaces []string
	for _, r := range refs {
		if !slices.Contains(namespaces, r.Namespace) {
			namespaces = append(namespaces, r.Namespace)
		}
	}
	slices.Sort(namespaces)
	p.Spec.Critical = v1alpha1.CriticalSelector{Namespaces: namespaces}
	p.Spec.MaxUnavailableTime = &metav1.Duration{}
	// A suspended policy got here only through IgnoreSuspend, a dry run
	// or a wait-only run (newBringup refuses it otherwise).
	p.Spec.Suspend = false
	p.Spec.DryRun = dryRun
	p.Spec.Default()
	if errs := p.Validate(); len(errs) > 0 {
		return nil, BadInput(fmt.Errorf("the essential workloads cannot be planned for: %w", errs.ToAggregate()))
	}
	return p, nil
}

func (b *bringup) run(ctx context.Context) (*Result, error) {
	first := true
	var lastErr error
	for {
		now := b.opts.Now()
		state, err := gather(ctx, b.opts.Client, b.opts.Reports, b.refs, b.opts.StopSwitch)
		switch {
		case err != nil && ctx.Err() != nil:
			return b.result, ctx.Err()
		case err != nil && first:
			return nil, err
		case err != nil:
			// A freshly restored apiserver hiccups; keep polling until the
			// deadline.
			if lastErr == nil || lastErr.Error() != err.Error() {
				b.out.line("api", "reading the cluster failed, retrying: %v", err)
			}
			lastErr = err
		default:
			lastErr = nil
			if first {
				b.begin(state)
				first = false
			}
			if done := b.step(ctx, state, now); done {
				return b.result, nil
			}
		}
		if !first && !now.Before(b.deadline) {
			b.finish(OutcomeTimedOut, now)
			return b.result, nil
		}
		t := time.NewTimer(b.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return b.result, ctx.Err()
		case <-t.C:
		}
	}
}

// begin fixes the deadline from the node count and the Lease observation
// bound from the Leases, and prints the header.
func (b *bringup) begin(s *clusterState) {
	b.observeFor = b.opts.LeaseObservation
	if b.observeFor <= 0 {
		b.observeFor = observationBound(s)
	}
	for _, w := range b.result.Warnings {
		b.out.line("warning", "warning: %s", w)
	}
	d := b.opts.Deadline.For(len(s.nodes))
	b.deadline = b.start.Add(d)
	b.result.Nodes = len(s.nodes)
	b.result.DeadlineSeconds = d.Seconds()
	b.result.Deadline = b.opts.Deadline.explain(len(s.nodes))
	mode := ""
	switch {
	case b.opts.DryRun || b.policy.Spec.DryRun:
		mode = " (dry run: nothing is changed)"
	case b.opts.WaitOnly:
		mode = " (wait only: nothing is changed)"
	}
	names := make([]string, len(b.refs))
	for i, r := range b.refs {
		names[i] = r.Display()
	}
	b.out.header("restore bring-up%s: %d essential workloads (%s) on %d nodes; deadline %s",
		mode, len(b.refs), strings.Join(names, ", "), len(s.nodes), b.result.Deadline)
}

// step runs one read-plan-act-judge round and reports whether the bring-up
// is over.
func (b *bringup) step(ctx context.Context, s *clusterState, now time.Time) bool {
	nodes := b.nodeHealth(s, now)
	dry := b.opts.DryRun || b.policy.Spec.DryRun
	stopped := s.stopped && !dry && !b.opts.WaitOnly
	b.noteStopSwitch(s.stopped, dry)
	if (dry || stopped) && !b.observed(s, nodes, now) {
		// A run that ends after one plan (a dry run, the stop switch)
		// reads the cluster until it has seen which Leases renew
		// (bounded), so that the plan it prints has the targets a real
		// run would have.
		return false
	}
	plan := rescue.PlanFor(b.snapshot(s, now, nil))
	b.zones, b.disruption = plan.Zones, plan.Disruption
	plan = b.liveTargetsOnly(plan, s, nodes, now)
	var hold string // why the actions are not applied; "" applies them
	switch {
	case b.opts.DryRun || (dry && !b.opts.WaitOnly):
		hold = "not applied (dry run)"
	case b.opts.WaitOnly:
		hold = "not applied (wait only)"
	case stopped:
		hold = fmt.Sprintf("not applied (stop switch ConfigMap %s exists)", b.opts.StopSwitch)
	}
	b.reportPlan(plan, hold != "")

	workloads := plan.Workloads()
	for _, a := range plan.Actions {
		b.act(ctx, a, workloads[a.Namespace+"/"+a.Pod], hold, now)
	}

	states := make([]State, 0, len(b.refs))
	b.result.Workloads = b.result.Workloads[:0]
	for _, r := range b.refs {
		ws := refuseUnsafe(s.evaluate(r, nodes), criticalOf(plan, s, r))
		if ws.State == StateAvailable {
			if _, ok := b.availAt[r]; !ok {
				b.availAt[r] = now.Sub(b.start).Seconds()
			}
			ws.AvailableAfter = b.availAt[r]
		}
		b.out.change("workload/"+r.String(), string(ws.State)+ws.Message, "%s: %s: %s", r.Display(), ws.State, ws.Message)
		b.result.Workloads = append(b.result.Workloads, ws)
		states = append(states, ws.State)
	}
	if dry {
		b.finish(OutcomeDryRun, now)
		return true
	}
	if stopped {
		b.finish(OutcomeStopped, now)
		return true
	}
	if outcome, done := outcomeFor(states, now, b.deadline); done {
		b.finish(outcome, now)
		return true
	}
	return false
}
