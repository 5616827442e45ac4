package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// Options configure a bring-up.
type Options struct {
	Client kubernetes.Interface
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
}

// Result is what a bring-up did and found; `-o json` prints it.
type Result struct {
	Outcome  Outcome `json:"outcome"`
	ExitCode int     `json:"exitCode"`
	// Message sums the outcome up in one line.
	Message string    `json:"message"`
	Started time.Time `json:"started"`
	// ElapsedSeconds since Started; DeadlineSeconds is the budget.
	ElapsedSeconds  float64 `json:"elapsedSeconds"`
	DeadlineSeconds float64 `json:"deadlineSeconds"`
	Deadline        string  `json:"deadline"`
	Nodes           int     `json:"nodes"`
	ReadyNodes      int     `json:"readyNodes"`
	// Zones are the zone states as kube-controller-manager computes them.
	Zones []ZoneReport `json:"zones"`
	// Workloads are the essential workloads, sorted.
	Workloads []WorkloadStatus `json:"workloads"`
	// Stranded are the essential pods on NotReady nodes, as last planned.
	Stranded []PodReport `json:"strandedPods"`
	// Actions are the actions taken (or, in a dry run, planned).
	Actions  []ActionReport `json:"actions"`
	Warnings []string       `json:"warnings,omitempty"`
}

// ZoneReport is one zone's state.
type ZoneReport struct {
	Zone     string `json:"zone"`
	State    string `json:"state"`
	NotReady int    `json:"notReady"`
	Total    int    `json:"total"`
	// Rate is upstream's NoExecute-tainting rate (nodes/s); 0 means no pod
	// is evicted from the zone's NotReady nodes.
	Rate   float64 `json:"evictionRate"`
	Reason string  `json:"reason"`
}

// PodReport is one essential pod on a NotReady node.
type PodReport struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Node      string          `json:"node"`
	Workload  string          `json:"workload"`
	Decision  rescue.Decision `json:"decision"`
	Reason    string          `json:"reason"`
}

// ActionReport is one action.
type ActionReport struct {
	AtSeconds float64           `json:"atSeconds"`
	Kind      rescue.ActionKind `json:"kind"`
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Pod       string            `json:"pod,omitempty"`
	Node      string            `json:"node,omitempty"`
	DryRun    bool              `json:"dryRun,omitempty"`
	// Result is rescue.ResultSucceeded, AlreadyDone, Refused or Failed
	// ("" when not applied); Outcome says what happened in words.
	Result  string `json:"result,omitempty"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// Err returns nil on success and otherwise an *Error with the outcome's
// exit code and message.
func (r *Result) Err() error {
	if r.ExitCode == ExitOK {
		return nil
	}
	return &Error{Code: r.ExitCode, Err: errors.New(r.Message)}
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
// The error is for bad input (ExitBadInput) and for failures before the
// first read; a bring-up that ends in a timeout or a refusal returns a
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
	policy, err := planningPolicy(opts.Selection.Policy, refs, opts.DryRun)
	if err != nil {
		return nil, err
	}
	b := &bringup{opts: opts, refs: refs, policy: policy, beats: newHeartbeats(), availAt: map[WorkloadRef]float64{}, planned: map[string]bool{}}
	b.start = opts.Now()
	b.out = &progress{w: opts.Progress, start: b.start, now: opts.Now, last: map[string]string{}}
	b.result = &Result{Started: b.start}
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
		state, err := gather(ctx, b.opts.Client, b.refs)
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

// begin fixes the deadline from the node count and prints the header.
func (b *bringup) begin(s *clusterState) {
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
	nodes := b.nodeHealth(s)
	plan := rescue.PlanFor(b.snapshot(s, now))
	b.zones, b.disruption = plan.Zones, plan.Disruption
	dry := b.opts.DryRun || b.policy.Spec.DryRun
	b.reportPlan(plan, dry || b.opts.WaitOnly)

	workloads := plan.Workloads()
	for _, a := range plan.Actions {
		b.act(ctx, a, workloads[a.Namespace+"/"+a.Pod], dry || b.opts.WaitOnly, now)
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
	if outcome, done := outcomeFor(states, now, b.deadline); done {
		b.finish(outcome, now)
		return true
	}
	return false
}

// nodeHealth combines the API's Ready condition with the heartbeats seen.
func (b *bringup) nodeHealth(s *clusterState) map[string]NodeHealth {
	out := make(map[string]NodeHealth, len(s.nodes))
	ready := 0
	for _, n := range s.nodes {
		h := NodeHealth{Ready: nodeReady(n.Status.Conditions), Heartbeat: b.beats.observe(n.Name, s.heartbeat[n.Name])}
		out[n.Name] = h
		if h.Ready {
			ready++
		}
		var what string
		switch {
		case !h.Ready:
			what = "NotReady"
		case h.Heartbeat:
			what = "Ready, heartbeat seen: alive"
		default:
			what = "Ready in the API, waiting for a heartbeat (its status may date from the backup)"
		}
		b.out.change("node/"+n.Name, what, "node %s: %s", n.Name, what)
	}
	b.result.ReadyNodes = ready
	return out
}

// snapshot builds the planner's input: every node, and of the essential
// workloads' namespaces only the essential pods and their owners.
func (b *bringup) snapshot(s *clusterState, now time.Time) rescue.Snapshot {
	snap := rescue.Snapshot{
		Now:                now,
		Nodes:              s.nodes,
		Namespaces:         s.namespaces,
		PVCs:               s.pvcs,
		Policies:           []*v1alpha1.RecoveryPolicy{b.policy},
		ZoneConfig:         b.opts.ZoneConfig,
		PreviousZones:      b.zones,
		PreviousDisruption: b.disruption,
		Defaults:           rescue.Defaults{ReplacementTimeout: b.opts.ReplacementTimeout},
	}
	seen := map[string]bool{}
	for _, r := range b.refs {
		for _, p := range s.podsOf(r) {
			seen[p.Namespace+"/"+p.Name] = true
		}
		snap.Pods = append(snap.Pods, s.podsOf(r)...)
		if d := s.workloads[r].deployment; d != nil {
			snap.Deployments = append(snap.Deployments, d)
			for _, rs := range s.replicaSets {
				if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.UID == d.UID {
					snap.ReplicaSets = append(snap.ReplicaSets, rs)
				}
			}
		}
	}
	// The other pods of the Ready nodes hold resources a replacement
	// needs; the planner only sums them (they are on no NotReady node).
	for _, p := range s.nodePods {
		if k := p.Namespace + "/" + p.Name; !seen[k] {
			seen[k] = true
			snap.Pods = append(snap.Pods, p)
		}
	}
	return snap
}

// criticalOf returns the plan's pods that belong to workload r.
func criticalOf(plan rescue.Plan, s *clusterState, r WorkloadRef) []rescue.CriticalPod {
	mine := map[string]bool{}
	for _, p := range s.podsOf(r) {
		mine[p.Name] = true
	}
	var out []rescue.CriticalPod
	for _, cp := range plan.Critical {
		if cp.Namespace == r.Namespace && mine[cp.Name] {
			out = append(out, cp)
		}
	}
	return out
}

func (b *bringup) reportPlan(plan rescue.Plan, dry bool) {
	b.result.Zones = b.result.Zones[:0]
	for _, z := range plan.Zones.Zones {
		zr := ZoneReport{Zone: zone.DisplayZone(z.Zone), State: z.State.String(), NotReady: z.NotReady, Total: z.Total, Rate: z.Rate, Reason: z.StateReason}
		b.result.Zones = append(b.result.Zones, zr)
		meaning := ""
		if z.NotReady > 0 && z.Rate == 0 {
			meaning = "; upstream evicts no pod from its NotReady nodes"
		}
		b.out.change("zone/"+z.Zone, zr.State+fmt.Sprint(z.NotReady, z.Total),
			"zone %s: %s (%s)%s", zr.Zone, zr.State, zr.Reason, meaning)
	}
	b.result.Stranded = b.result.Stranded[:0]
	for _, cp := range plan.Critical {
		b.result.Stranded = append(b.result.Stranded, PodReport{
			Namespace: cp.Namespace, Name: cp.Name, Node: cp.Node, Workload: cp.Workload.String(), Decision: cp.Decision, Reason: cp.Reason,
		})
		b.out.change("pod/"+cp.Key(), string(cp.Decision)+string(cp.Action)+fmt.Sprint(cp.Terminating),
			"pod %s (%s) on NotReady node %s: %s", cp.Key(), cp.Workload, cp.Node, decisionWords(cp, dry))
	}
	for _, w := range plan.Warnings {
		if !slices.Contains(b.result.Warnings, w) {
			b.result.Warnings = append(b.result.Warnings, w)
			b.out.line("warning", "warning: %s", w)
		}
	}
}

func decisionWords(cp rescue.CriticalPod, dry bool) string {
	switch {
	case cp.Action != "" && dry:
		return fmt.Sprintf("would %s, not applied (%s)", cp.Action, cp.Reason)
	case cp.Action != "":
		return fmt.Sprintf("%s (%s)", cp.Action, cp.Reason)
	}
	return fmt.Sprintf("%s: %s", cp.Decision, cp.Reason)
}

// finish records the outcome and prints the summary.
func (b *bringup) finish(o Outcome, now time.Time) {
	r := b.result
	r.Outcome, r.ExitCode = o, o.ExitCode()
	r.ElapsedSeconds = now.Sub(b.start).Seconds()
	var avail, notAvail []string
	for _, w := range r.Workloads {
		if w.State == StateAvailable {
			avail = append(avail, w.Ref.Display())
		} else {
			notAvail = append(notAvail, fmt.Sprintf("%s %s: %s", w.Ref.Display(), w.State, w.Message))
		}
	}
	elapsed := now.Sub(b.start).Round(100 * time.Millisecond)
	switch o {
	case OutcomeSucceeded:
		r.Message = fmt.Sprintf("bring-up succeeded in %s: all %d essential workloads available (deadline %s)", elapsed, len(r.Workloads), r.Deadline)
	case OutcomeDryRun:
		r.Message = fmt.Sprintf("dry run: %d of %d essential workloads available now, %d actions planned, nothing changed", len(avail), len(r.Workloads), len(r.Actions))
	case OutcomeRefusedUnsafe:
		r.Message = fmt.Sprintf("bring-up refused as unsafe after %s: %d of %d workloads available; these need fencing first (taint the dead node %s once it is confirmed off, then run again):\n  %s",
			elapsed, len(avail), len(r.Workloads), "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", strings.Join(notAvail, "\n  "))
	case OutcomeTimedOut:
		r.Message = fmt.Sprintf("bring-up timed out after %s (deadline %s): %d of %d workloads available; still missing:\n  %s",
			elapsed, r.Deadline, len(avail), len(r.Workloads), strings.Join(notAvail, "\n  "))
	}
	b.out.line("summary", "%s", r.Message)
}

func nodeReady(conds []corev1.NodeCondition) bool {
	for _, c := range conds {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
