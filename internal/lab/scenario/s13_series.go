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
	if opts.Kill == nil || opts.Revive == nil {
		return nil, errors.New("S13 series: needs both the death (Kill) and its undoing (Revive)")
	}
	interval := opts.RenewInterval
	if interval <= 0 {
		interval = c.Timings.NodeLeaseDuration / 4
	}
	settle := opts.Settle
	if settle <= 0 {
		settle = 2 * time.Minute
	}
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	w := opts.Workload
	if len(w.AllowedNodes) == 0 {
		for _, n := range c.NodeNames {
			if n != opts.Peer {
				w.AllowedNodes = append(w.AllowedNodes, n)
			}
		}
	}
	w.PodLabels = s13EndpointLabel // as RunS13 labels it: behind the Service
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return nil, err
	}
	// The workload and the Service first, so that the first death, too,
	// comes at its drawn point and not after a deployment's wait.
	dctx, cancel := context.WithCancel(ctx)
	err = deployOnPreferredNode(dctx, c, tl, Observe(dctx, c, tl, w), w)
	cancel()
	if err != nil {
		return nil, err
	}
	if err := s13Service(ctx, c, w.Namespace, opts.Peer); err != nil {
		return nil, err
	}
	if err := waitSteadyNodes(ctx, c, tl); err != nil {
		return nil, err
	}
	perMinute := opts.MarksPerMinute
	if perMinute <= 0 {
		perMinute = unreachable.DefaultMinMarksPerMinute
	}
	var out []S13Death
	var marked []time.Time // when each verdict had been seen: at or after its mark
	victim := w.PreferNode
	for i := range opts.Deaths {
		if i > 0 {
			if victim, err = s13Holder(ctx, c, w, settle); err != nil {
				return out, fmt.Errorf("death %d: %w", i+1, err)
			}
		}
		if err := waitS13Healthy(ctx, c, cl, victim, opts.Agents, settle); err != nil {
			return out, fmt.Errorf("before death %d: %w", i+1, err)
		}
		if err := waitEndpoints(ctx, c, w.Namespace, func(ready map[string]bool) bool { return ready[victim] && ready[opts.Peer] }, settle); err != nil {
			return out, fmt.Errorf("before death %d: %w", i+1, err)
		}
		if len(marked) >= perMinute {
			// The mark perMinute deaths ago must be out of the cap's
			// minute (a second more: the taint's time is whole seconds).
			free := marked[len(marked)-perMinute].Add(time.Minute + time.Second)
			if left := time.Until(free); left > 0 {
				tl.Step("death %d waits %.1fs, until the controller's cap of %d taints a minute has room", i+1, left.Seconds(), perMinute)
				if err := sleepUntil(ctx, free); err != nil {
					return out, err
				}
			}
		}
		planned := time.Duration(rng.Int64N(int64(interval)))
		renewed, err := waitRenewPoint(ctx, c, victim, interval, planned)
		if err != nil {
			return out, fmt.Errorf("death %d: %w", i+1, err)
		}
		tl.Step("death %d of %d: %s, %.2fs after its Lease's renewal at %s (drawn from U(0, %s))",
			i+1, opts.Deaths, victim, planned.Seconds(), renewed.Format("15:04:05.000"), interval)
		d, err := s13Round(ctx, c, tl, w, victim, opts)
		d.PlannedOffset = planned
		if err != nil {
			return out, fmt.Errorf("death %d (%s): %w", i+1, victim, err)
		}
		if last, err := leaseRenewTime(ctx, c, victim); err == nil {
			d.Offset = d.DiedAt.Sub(last)
		}
		tl.Step("death %d: %s died %.2fs after its last renewal; verdict %.1fs, endpoint off %.1fs, replacement Ready %.1fs",
			i+1, victim, d.Offset.Seconds(), d.Verdict.Seconds(), d.EndpointsOff.Seconds(), d.ReplacementReady.Seconds())
		out = append(out, d)
		marked = append(marked, time.Now())

		tl.Step("%s comes back: its host answers, its agent runs on and its Lease renews again", victim)
		if err := opts.Revive(victim); err != nil {
			return out, fmt.Errorf("revive %s's host: %w", victim, err)
		}
		if err := c.StartNode(ctx, victim); err != nil {
			return out, err
		}
		if err := waitS13Healthy(ctx, c, cl, victim, opts.Agents, settle); err != nil {
			return out, fmt.Errorf("after death %d: %w", i+1, err)
		}
		tl.Step("%s healthy again on both planes (no %s taint, its watchers read it Alive)", victim, UnreachableTaint)
	}
	return out, nil
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
