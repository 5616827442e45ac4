package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/install"
	"rebound/internal/lab/report"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// S13 as a series: one death says little about two-plane detection,
// because the Lease plane's verdict depends on where in the Lease's renew
// interval the node died (just after a renewal, the Lease looks fresh for
// a whole interval more). The series kills a node at a uniformly random
// point of its renew interval, measures as RunS13 does, brings the node
// back, waits until both planes hold it alive again, and repeats.

// S13SeriesOptions tune a series of S13 deaths on one sandbox that runs
// rebound's controller and gossip agents.
type S13SeriesOptions struct {
	// Workload is the critical Deployment; its pod starts on
	// Workload.PreferNode, the first victim. Unless AllowedNodes is set the
	// series confines it to every node but Peer, so that no replacement
	// lands beside the Service's other endpoint.
	Workload Workload
	// Peer is the node of the Service's other endpoint; it never dies.
	Peer string
	// Deaths is how many deaths to measure (at least 1).
	Deaths int
	// Kill is the death of a node in the same instant as its Lease stops
	// (GossipAgent.HostDeath: its host silent, its agent frozen).
	Kill func(node string) error
	// Revive undoes Kill (GossipAgent.HostRevive): the node's host answers
	// and its agent runs again. The series resumes the node's Lease itself.
	Revive func(node string) error
	// Agents are the nodes that run a gossip agent: the members whose reads
	// must hold a revived node alive before the next death.
	Agents []string
	// RenewInterval is the Lease's renew interval; zero means a quarter of
	// the sandbox's node lease duration, as kwok renews.
	RenewInterval time.Duration
	// Timeout bounds each death's wait for the replacement (RunS13's);
	// Settle bounds each wait for a revived node to be healthy again
	// (zero: two minutes).
	Timeout, Settle time.Duration
	// Rand draws the death offsets; nil means a random seed.
	Rand *rand.Rand
	// MarksPerMinute is the controller's cap on its taints within any
	// minute (pkg/unreachable); zero means its floor,
	// unreachable.DefaultMinMarksPerMinute, the cap up to 20 nodes. The
	// series paces its deaths under it: a death the cap holds back would
	// measure the cap, not the detection.
	MarksPerMinute int
}

// S13Death is one death of a series: RunS13's figures, the victim and
// where in its Lease's renew interval it died.
type S13Death struct {
	S13Result
	Victim string `json:"victim"`
	// PlannedOffset is the drawn point of the renew interval; Offset is
	// the death after the Lease's last renewal as the API held it after
	// the death (it differs by the runner's few milliseconds of setup, or
	// by a whole interval less when a renewal slipped in between).
	PlannedOffset time.Duration `json:"plannedOffset"`
	Offset        time.Duration `json:"offset"`
}

// RunS13Series plays opts.Deaths deaths of S13 on c, one after another,
// each through RunS13. Each death kills the node that holds the workload's
// pod at that moment (the previous replacement), so the workload is
// re-placed every time without being deployed again.
func RunS13Series(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S13SeriesOptions) ([]S13Death, error) {
	if opts.Deaths < 1 {
		return nil, fmt.Errorf("S13 series: %d deaths: at least 1", opts.Deaths)
	}
	s, err := newS13Series(ctx, c, tl, opts)
	if err != nil {
		return nil, err
	}
	var out []S13Death
	victim := s.w.PreferNode
	for i := range opts.Deaths {
		if i > 0 {
			if victim, err = s13Holder(ctx, c, s.w, s.settle); err != nil {
				return out, fmt.Errorf("death %d: %w", i+1, err)
			}
		}
		d, err := s.death(ctx, victim, fmt.Sprintf("death %d of %d", i+1, opts.Deaths))
		if err != nil {
			return out, fmt.Errorf("death %d: %w", i+1, err)
		}
		out = append(out, d)
		if err := s.revive(ctx, victim); err != nil {
			return out, fmt.Errorf("after death %d: %w", i+1, err)
		}
	}
	return out, nil
}

// s13Series is what the deaths of a series share: the workload as
// deployed, the controller's cap and the marks made under it.
type s13Series struct {
	c         *sandbox.Cluster
	cl        client.Client
	tl        *Timeline
	opts      S13SeriesOptions
	w         Workload
	interval  time.Duration
	settle    time.Duration
	rng       *rand.Rand
	perMinute int
	marked    []time.Time // when each node may have been marked: at or after its mark
}

// newS13Series deploys the workload and the Service and waits for the
// cluster's steady state.
func newS13Series(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S13SeriesOptions) (*s13Series, error) {
	if opts.Kill == nil || opts.Revive == nil {
		return nil, errors.New("S13 series: needs both the death (Kill) and its undoing (Revive)")
	}
	s := &s13Series{c: c, tl: tl, opts: opts, w: opts.Workload, interval: opts.RenewInterval, settle: opts.Settle, rng: opts.Rand, perMinute: opts.MarksPerMinute}
	if s.interval <= 0 {
		s.interval = c.Timings.NodeLeaseDuration / 4
	}
	if s.settle <= 0 {
		s.settle = 2 * time.Minute
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if s.perMinute <= 0 {
		s.perMinute = unreachable.DefaultMinMarksPerMinute
	}
	if len(s.w.AllowedNodes) == 0 {
		for _, n := range c.NodeNames {
			if n != opts.Peer {
				s.w.AllowedNodes = append(s.w.AllowedNodes, n)
			}
		}
	}
	s.w.PodLabels = s13EndpointLabel // as RunS13 labels it: behind the Service
	var err error
	if s.cl, err = install.NewClient(c.Config); err != nil {
		return nil, err
	}
	// The workload and the Service first, so that the first death, too,
	// comes at its drawn point and not after a deployment's wait.
	dctx, cancel := context.WithCancel(ctx)
	err = deployOnPreferredNode(dctx, c, tl, Observe(dctx, c, tl, s.w), s.w)
	cancel()
	if err != nil {
		return nil, err
	}
	if err := s13Service(ctx, c, s.w.Namespace, opts.Peer); err != nil {
		return nil, err
	}
	if err := waitSteadyNodes(ctx, c, tl); err != nil {
		return nil, err
	}
	return s, nil
}

// waitMarkRoom waits until the controller's cap on its taints has room
// for one more within the minute: the mark perMinute marks ago must be
// out of the cap's minute (a second more: the taint's time is whole
// seconds). A death the cap holds back would measure the cap, not the
// detection.
func (s *s13Series) waitMarkRoom(ctx context.Context, what string) error {
	if len(s.marked) < s.perMinute {
		return nil
	}
	free := s.marked[len(s.marked)-s.perMinute].Add(time.Minute + time.Second)
	if left := time.Until(free); left > 0 {
		s.tl.Step("%s waits %.1fs, until the controller's cap of %d taints a minute has room", what, left.Seconds(), s.perMinute)
		return sleepUntil(ctx, free)
	}
	return nil
}

// death kills victim, the workload's node, at a drawn point of its
// Lease's renew interval, once it is healthy, and measures as RunS13
// does. The node stays dead: revive brings it back.
func (s *s13Series) death(ctx context.Context, victim, what string) (S13Death, error) {
	c, w := s.c, s.w
	if err := waitS13Healthy(ctx, c, s.cl, victim, s.opts.Agents, s.settle); err != nil {
		return S13Death{}, fmt.Errorf("before %s: %w", what, err)
	}
	if err := waitEndpoints(ctx, c, w.Namespace, func(ready map[string]bool) bool { return ready[victim] && ready[s.opts.Peer] }, s.settle); err != nil {
		return S13Death{}, fmt.Errorf("before %s: %w", what, err)
	}
	if err := s.waitMarkRoom(ctx, what); err != nil {
		return S13Death{}, err
	}
	planned := time.Duration(s.rng.Int64N(int64(s.interval)))
	renewed, err := waitRenewPoint(ctx, c, victim, s.interval, planned)
	if err != nil {
		return S13Death{}, err
	}
	s.tl.Step("%s: %s, %.2fs after its Lease's renewal at %s (drawn from U(0, %s))",
		what, victim, planned.Seconds(), renewed.Format("15:04:05.000"), s.interval)
	d, err := s13Round(ctx, c, s.tl, w, victim, s.opts)
	d.PlannedOffset = planned
	if err != nil {
		return d, fmt.Errorf("%s: %w", victim, err)
	}
	if last, err := leaseRenewTime(ctx, c, victim); err == nil {
		d.Offset = d.DiedAt.Sub(last)
	}
	s.tl.Step("%s: %s died %.2fs after its last renewal; verdict %.1fs, endpoint off %.1fs, replacement Ready %.1fs",
		what, victim, d.Offset.Seconds(), d.Verdict.Seconds(), d.EndpointsOff.Seconds(), d.ReplacementReady.Seconds())
	s.marked = append(s.marked, time.Now())
	return d, nil
}

// revive brings node back and waits until both planes hold it alive.
func (s *s13Series) revive(ctx context.Context, node string) error {
	s.tl.Step("%s comes back: its host answers, its agent runs on and its Lease renews again", node)
	if err := s.opts.Revive(node); err != nil {
		return fmt.Errorf("revive %s's host: %w", node, err)
	}
	if err := s.c.StartNode(ctx, node); err != nil {
		return err
	}
	if err := waitS13Healthy(ctx, s.c, s.cl, node, s.opts.Agents, s.settle); err != nil {
		return err
	}
	s.tl.Step("%s healthy again on both planes (no %s taint, its watchers read it Alive)", node, UnreachableTaint)
	return nil
}

// S13RollingRebootOptions tune the rolling reboot lane: every node
// reboots in turn, then the workload's node dies.
type S13RollingRebootOptions struct {
	// Series are the deaths' settings; Deaths is not read (one death).
	Series S13SeriesOptions
	// Down is how long each node is down in its reboot (its Lease stopped,
	// its host silent, its agent frozen); zero means 30 s, a machine's
	// reboot, long enough for both planes to find it dead.
	Down time.Duration
	// Nodes reboot in this order; empty means every node of the sandbox.
	Nodes []string
	// Marked are the marks made on the sandbox before (a series' verdicts,
	// S13SeriesPair.Marks), so that the reboots and the death are paced
	// under the controller's cap from the first.
	Marked []time.Time
}

// S13RollingReboot is what the lane measured: the death after the
// reboots, and when each reboot's node was back on both planes.
type S13RollingReboot struct {
	Death S13Death `json:"death"`
	// Returned is when each rebooted node was healthy again, in order.
	Returned []time.Time `json:"returned"`
}

// RunS13RollingReboot plays a rolling reboot on c (a kernel update): each
// node dies and comes back after opts.Down, one after another, the next
// once the previous is alive again on both planes; then the node that
// holds the workload's pod dies for good and is measured as a series'
// death is. A return is no lie: the death after the reboots must be
// judged as early as the first death of a fresh cluster.
func RunS13RollingReboot(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S13RollingRebootOptions) (S13RollingReboot, error) {
	var out S13RollingReboot
	down := opts.Down
	if down <= 0 {
		down = 30 * time.Second
	}
	nodes := opts.Nodes
	if len(nodes) == 0 {
		nodes = c.NodeNames
	}
	series := opts.Series
	if _, err := c.Client.AppsV1().Deployments(series.Workload.Namespace).Get(ctx, series.Workload.Name, metav1.GetOptions{}); err == nil {
		// After a series on the same sandbox: the workload is wherever
		// its last replacement went.
		if series.Workload.PreferNode, err = s13Holder(ctx, c, series.Workload, time.Minute); err != nil {
			return out, err
		}
	}
	s, err := newS13Series(ctx, c, tl, series)
	if err != nil {
		return out, err
	}
	s.marked = append(s.marked, opts.Marked...)
	for i, n := range nodes {
		what := fmt.Sprintf("reboot %d of %d", i+1, len(nodes))
		if err := waitS13Healthy(ctx, c, s.cl, n, s.opts.Agents, s.settle); err != nil {
			return out, fmt.Errorf("before %s: %w", what, err)
		}
		if err := s.waitMarkRoom(ctx, what); err != nil {
			return out, err
		}
		tl.Step("%s: %s goes down for %s: its Lease stops, its host goes silent and its agent freezes", what, n, down)
		if err := s.opts.Kill(n); err != nil {
			return out, fmt.Errorf("%s: %w", what, err)
		}
		if err := c.StopNode(ctx, n); err != nil {
			return out, err
		}
		if err := sleep(ctx, down); err != nil {
			return out, err
		}
		// Down long enough to be found dead: it counts under the cap.
		s.marked = append(s.marked, time.Now())
		if err := s.revive(ctx, n); err != nil {
			return out, fmt.Errorf("%s: %w", what, err)
		}
		out.Returned = append(out.Returned, time.Now())
	}
	victim, err := s13Holder(ctx, c, s.w, s.settle)
	if err != nil {
		return out, fmt.Errorf("after the rolling reboot: %w", err)
	}
	out.Death, err = s.death(ctx, victim, "the death after the rolling reboot")
	if err != nil {
		return out, err
	}
	return out, s.revive(ctx, victim)
}

// waitSteadyNodes waits until every node has been Ready for a node grace
// period, as in a cluster in its steady state. A fresh sandbox's nodes
// all just became Ready, and rebound holds early rescues until a grace
// after the first return of the nodes Ready now (a full disruption may
// have just ended): a death before would measure that hold.
func waitSteadyNodes(ctx context.Context, c *sandbox.Cluster, tl *Timeline) error {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the nodes: %w", err)
	}
	var last time.Time
	for _, n := range nodes.Items {
		cond := kubestatus.NodeReadyCondition(&n)
		if cond == nil || cond.Status != corev1.ConditionTrue {
			return fmt.Errorf("node %s is not Ready: the series starts on a healthy cluster", n.Name)
		}
		if cond.LastTransitionTime.After(last) {
			last = cond.LastTransitionTime.Time
		}
	}
	// A second more: the transition's time is whole seconds.
	steady := last.Add(c.Timings.NodeMonitorGracePeriod + time.Second)
	if left := time.Until(steady); left > 0 {
		tl.Step("the nodes became Ready at %s: the first death waits %.1fs, until they have been Ready for a node grace (%s)",
			last.Format("15:04:05"), left.Seconds(), c.Timings.NodeMonitorGracePeriod)
		return sleepUntil(ctx, steady)
	}
	return nil
}

// s13Round is one RunS13 with victim as the workload's node, its watchers
// ended with the round.
func s13Round(ctx context.Context, c *sandbox.Cluster, tl *Timeline, w Workload, victim string, opts S13SeriesOptions) (S13Death, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The Deployment exists after the first round: PreferNode only tells
	// RunS13 where the pod is now.
	w.PreferNode = victim
	r, err := RunS13(rctx, c, tl, S13Options{Workload: w, Peer: opts.Peer, Timeout: opts.Timeout,
		KillAgent: func() error { return opts.Kill(victim) }})
	return S13Death{S13Result: r, Victim: victim}, err
}

// s13Holder waits until the workload has exactly one live pod, Ready, and
// returns its node.
func s13Holder(ctx context.Context, c *sandbox.Cluster, w Workload, timeout time.Duration) (string, error) {
	var node string
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + w.Name})
		if err != nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		last = last[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				last = append(last, p.Spec.NodeName)
				if kubestatus.PodReady(&p) {
					node = p.Spec.NodeName
				}
			}
		}
		return len(last) == 1 && node == last[0], nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: not one Ready pod within %s (live pods on %v)", w, timeout, last)
	}
	return node, nil
}

// leaseRenewTime is the node's Lease's renewTime.
func leaseRenewTime(ctx context.Context, c *sandbox.Cluster, node string) (time.Time, error) {
	l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}, fmt.Errorf("the Lease of %s has no renewTime", node)
	}
	return l.Spec.RenewTime.Time, nil
}

// waitRenewPoint waits for the next renewal of node's Lease, then until
// offset after it on this clock (kwok, which renews, runs on the same
// machine), and returns the renewal.
func waitRenewPoint(ctx context.Context, c *sandbox.Cluster, node string, interval, offset time.Duration) (time.Time, error) {
	first, err := leaseRenewTime(ctx, c, node)
	if err != nil {
		return time.Time{}, err
	}
	var renewed time.Time
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*interval, false, func(ctx context.Context) (bool, error) {
		t, err := leaseRenewTime(ctx, c, node)
		if err != nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		renewed = t
		return t.After(first), nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("the Lease of %s not renewed within %s of %s: %w", node, 3*interval, first.Format(time.RFC3339Nano), err)
	}
	return renewed, sleepUntil(ctx, renewed.Add(offset))
}

// sleepUntil waits for a moment on the clock, not a condition: a timer is
// the wait.
func sleepUntil(ctx context.Context, at time.Time) error { return sleep(ctx, time.Until(at)) }

// waitS13Healthy waits until node is alive again on both planes: the API
// has it Ready without rebound's taint, every agent has written a gossip
// read (it writes none before it reached another member), and each of
// its watchers on the agents' ring reads it Alive. The member count is
// not asked: an agent writes it only with a change of its watches or at
// its report interval, a minute.
func waitS13Healthy(ctx context.Context, c *sandbox.Cluster, cl client.Client, node string, agents []string, timeout time.Duration) error {
	watchers := liveness.Watchers(node, agents, liveness.DefaultWatchers)
	why := "not read yet"
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // poll through apiserver hiccups
		}
		if !kubestatus.NodeReady(n) {
			why = "the node is not Ready"
			return false, nil
		}
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == UnreachableTaint }) {
			why = "the node still carries " + UnreachableTaint
			return false, nil
		}
		for _, a := range agents {
			var r v1alpha1.PeeringReport
			if err := cl.Get(ctx, client.ObjectKey{Name: a}, &r); err != nil || r.Gossip == nil {
				why = "no gossip read from " + a
				return false, nil //nolint:nilerr // not written yet
			}
			if !slices.Contains(watchers, a) {
				continue
			}
			i := slices.IndexFunc(r.Gossip.Watches, func(w v1alpha1.GossipWatch) bool { return w.Node == node })
			if i < 0 || r.Gossip.Watches[i].State != string(liveness.GossipAlive) {
				why = fmt.Sprintf("watcher %s does not read %s Alive", a, node)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s not healthy again within %s: %s", node, timeout, why)
	}
	return nil
}

// Summary is the median and the worst of a series of durations.
type Summary struct {
	N             int
	Median, Worst time.Duration
}

// Summarize returns ds's median (the mean of the two middle values for an
// even count) and its largest value; zeros for none.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return Summary{N: len(s), Median: m, Worst: s[len(s)-1]}
}

// S13SeriesPairOptions tune S13 on both lanes: one death without rebound
// (upstream's figures do not depend on where in the renew interval the
// node died, up to the one interval its grace runs from), a series with.
type S13SeriesPairOptions struct {
	Series S13SeriesOptions
}

// S13SeriesPair is one death without rebound and a series with.
type S13SeriesPair struct {
	Without S13Result
	With    []S13Death
}

// RunS13SeriesPair plays both lanes at once.
func RunS13SeriesPair(ctx context.Context, p Pair, opts S13SeriesPairOptions) (S13SeriesPair, error) {
	var out S13SeriesPair
	var err error
	var without, with []S13Death
	without, with, err = runPair(p, func(c *sandbox.Cluster, tl *Timeline, rebound bool) ([]S13Death, error) {
		if rebound {
			return RunS13Series(ctx, c, tl, opts.Series)
		}
		s := opts.Series
		r, err := RunS13(ctx, c, tl, S13Options{Workload: s.Workload, Peer: s.Peer, Timeout: s.Timeout})
		return []S13Death{{S13Result: r, Victim: s.Workload.PreferNode}}, err
	})
	if len(without) > 0 {
		out.Without = without[0].S13Result
	}
	out.With = with
	return out, err
}

// Marks are when the series' taints had been added, at the latest (the
// verdict's time is whole seconds: a second more), for the cap's pacing
// of what comes after on the same sandbox.
func (p S13SeriesPair) Marks() []time.Time {
	out := make([]time.Time, 0, len(p.With))
	for _, d := range p.With {
		out = append(out, d.DiedAt.Add(d.Verdict+time.Second))
	}
	return out
}

// Figures are the series' summaries: the verdict, the endpoint off and
// the replacement Ready, each from the death.
func (p S13SeriesPair) Figures() (verdict, endpointsOff, replacementReady Summary) {
	var v, e, r []time.Duration
	for _, d := range p.With {
		v, e, r = append(v, d.Verdict), append(e, d.EndpointsOff), append(r, d.ReplacementReady)
	}
	return Summarize(v), Summarize(e), Summarize(r)
}

// Write writes the METRIC lines: the lane without rebound's one death
// (s13_*_without_rebound), the series' count, medians and worsts
// (detect_*), and the speedups of the medians.
func (p S13SeriesPair) Write(w *report.Writer) {
	verdict, off, ready := p.Figures()
	w.Count("detect_deaths", len(p.With))
	for _, f := range []struct {
		name    string
		without time.Duration
		with    Summary
	}{
		{"death_to_verdict", p.Without.Verdict, verdict},
		{"death_to_endpoints_off", p.Without.EndpointsOff, off},
		{"death_to_replacement_ready", p.Without.ReplacementReady, ready},
	} {
		w.Metric("s13_"+f.name+"_without_rebound", f.without.Seconds(), "s")
		if f.with.N > 0 {
			w.Metric("detect_"+f.name+"_median", f.with.Median.Seconds(), "s")
			w.Metric("detect_"+f.name+"_worst", f.with.Worst.Seconds(), "s")
		}
	}
	if ready.Median > 0 {
		w.Metric("s13_speedup", p.Without.ReplacementReady.Seconds()/ready.Median.Seconds(), "x")
	}
	if off.Median > 0 {
		w.Metric("s13_endpoints_speedup", p.Without.EndpointsOff.Seconds()/off.Median.Seconds(), "x")
	}
}

// Lines are the lines Write writes, as text.
func (p S13SeriesPair) Lines() ([]string, error) { return report.Lines(p.Write) }
