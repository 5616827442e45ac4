package scenario

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

// S8: an agent lies about its sessions. The lie is written directly as
// PeeringReports, the way a compromised agent would, with a credential
// allowed to write the liar's own report only: what it claims is the
// strongest lie the evidence rules accept (a session with the dead node
// Established, re-established just now, refreshed every LieInterval).

// S8LiarOptions tune the scenario. Zero values mean the defaults.
type S8LiarOptions struct {
	// PruneGrace is the peering controller's grace; ReportMaxAge its
	// report max age. Hold is how long the dead nodes are checked to stay
	// in while the lie is fresh (default 3x PruneGrace).
	PruneGrace   time.Duration
	ReportMaxAge time.Duration
	Hold         time.Duration
	LieInterval  time.Duration
	// Logs receives the controller's log.
	Logs io.Writer
}

func (o S8LiarOptions) withDefaults() S8LiarOptions {
	if o.PruneGrace == 0 {
		o.PruneGrace = 3 * time.Second
	}
	if o.ReportMaxAge == 0 {
		o.ReportMaxAge = 20 * time.Second
	}
	if o.Hold == 0 {
		o.Hold = 3 * o.PruneGrace
	}
	if o.LieInterval == 0 {
		// Often enough that a claim newer than the dead node's NotReady
		// transition (the API keeps seconds) is written within its grace.
		o.LieInterval = 500 * time.Millisecond
	}
	if o.Logs == nil {
		o.Logs = io.Discard
	}
	return o
}

// S8LiarResult is what the scenario measured, from the published set.
type S8LiarResult struct {
	// KeptWhileFresh: every dead node stayed in the set for Hold while
	// its liar's report was fresh and the liar Ready (the lie works only
	// that long; anything else would ignore live agents' evidence).
	KeptWhileFresh bool
	// StaleToPruned: the liar stopped writing (its report ages out) ->
	// the dead node it lied about left the set.
	StaleToPruned time.Duration
	// ReporterNotReadyToPruned: the second liar went NotReady (and kept
	// writing) -> the dead node it lied about left the set.
	ReporterNotReadyToPruned time.Duration
	// Reason is the published reason of a dead node kept by a lie.
	Reason peering.Reason
}

// S8LyingAgent plays both halves on a sandbox of at least 5 nodes:
// nodes[1] lies about nodes[4] and then stops writing; nodes[2] lies
// about nodes[3] and then goes NotReady while still writing. nodes[0]
// stays Ready throughout.
func S8LyingAgent(ctx context.Context, c *sandbox.Cluster, opts S8LiarOptions) (S8LiarResult, error) {
	opts = opts.withDefaults()
	var res S8LiarResult
	if len(c.NodeNames) < 5 {
		return res, fmt.Errorf("S8LyingAgent needs 5 nodes, the sandbox has %d", len(c.NodeNames))
	}
	names := c.NodeNames
	for i, n := range names {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"10.88.0.%d/32"}}}`, peering.AnnotationCalicoIPv4, i+1)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return res, err
		}
	}
	pc, err := StartPeeringController(ctx, c, controller.PeeringOptions{
		Name:   "peering-s8-liar",
		Config: peering.Config{PruneGracePeriod: opts.PruneGrace, Evidence: peering.EvidenceOptions{ReportMaxAge: opts.ReportMaxAge}},
		State:  types.NamespacedName{Namespace: controller.DefaultPeeringNamespace, Name: "rebound-peering-s8"},
	}, opts.Logs)
	if err != nil {
		return res, err
	}
	defer pc.Stop()
	if err := waitMembers(ctx, c, pc.PeerSet, 60*time.Second, "every node in the set", func(m []string) bool { return len(m) == len(names) }); err != nil {
		return res, err
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return res, err
	}
	liars := &lieWriter{w: agent.APIReportWriter{Client: dyn}, every: opts.LieInterval, stopped: map[string]bool{}, last: map[string]time.Time{}}
	lctx, stopLies := context.WithCancel(ctx)
	defer stopLies()
	go liars.run(lctx, map[string]string{names[1]: names[4], names[2]: names[3]})

	// Both dead nodes die; the lies keep them in past their grace.
	for _, n := range []string{names[3], names[4]} {
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range []string{names[3], names[4]} {
		if err := c.WaitNodeReady(ctx, n, false, 90*time.Second); err != nil {
			return res, err
		}
	}
	res.KeptWhileFresh = true
	deadline := time.Now().Add(opts.PruneGrace + opts.Hold)
	for time.Now().Before(deadline) {
		s, err := PublishedSet(ctx, c.Client, pc.PeerSet)
		if err != nil {
			return res, err
		}
		m := Members(s)
		if !slices.Contains(m, names[3]) || !slices.Contains(m, names[4]) {
			res.KeptWhileFresh = false
			break
		}
		for _, p := range s.Peers {
			if p.Name == names[4] {
				res.Reason = p.Reason
			}
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}

	if err := liars.lastErr(); err != nil {
		return res, fmt.Errorf("the liars' reports: %w", err)
	}
	// Half 1: the first liar stops writing; its last report ages out.
	lastWrite := liars.stop(names[1])
	if err := waitMembers(ctx, c, pc.PeerSet, opts.ReportMaxAge+60*time.Second, names[4]+" leaves after the lie goes stale", func(m []string) bool { return !slices.Contains(m, names[4]) }); err != nil {
		return res, err
	}
	res.StaleToPruned = time.Since(lastWrite)

	// Half 2: the second liar goes NotReady, still writing.
	if err := c.StopNode(ctx, names[2]); err != nil {
		return res, err
	}
	if err := c.WaitNodeReady(ctx, names[2], false, 90*time.Second); err != nil {
		return res, err
	}
	n2, err := c.Client.CoreV1().Nodes().Get(ctx, names[2], metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	_, notReadyAt := kube.Ready(n2)
	if err := waitMembers(ctx, c, pc.PeerSet, opts.ReportMaxAge+60*time.Second, names[3]+" leaves once its liar is NotReady", func(m []string) bool { return !slices.Contains(m, names[3]) }); err != nil {
		return res, err
	}
	res.ReporterNotReadyToPruned = time.Since(notReadyAt)
	return res, nil
}

// lieWriter writes, for each liar, a report that its session with the
// dead node is Established since a second ago, every interval, until
// stopped.
type lieWriter struct {
	w     agent.ReportWriter
	every time.Duration

	mu      sync.Mutex
	stopped map[string]bool
	last    map[string]time.Time
	err     error // the last failed write
}

// lastErr is the last failed write, nil when none failed.
func (l *lieWriter) lastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *lieWriter) run(ctx context.Context, lies map[string]string) {
	for {
		for liar, dead := range lies {
			l.mu.Lock()
			stopped := l.stopped[liar]
			l.mu.Unlock()
			if stopped {
				continue
			}
			now := time.Now()
			r := peering.Report{Reporter: liar, ObservedAt: now, Sessions: []peering.Session{{Peer: dead, State: peering.StateEstablished, Since: now}}}
			err := l.w.WriteReport(ctx, r)
			l.mu.Lock()
			if err == nil {
				l.last[liar] = now
			} else if ctx.Err() == nil {
				l.err = err
			}
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.every):
		}
	}
}

// stop ends one liar's writes and returns when it last wrote.
func (l *lieWriter) stop(liar string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped[liar] = true
	return l.last[liar]
}

// waitMembers polls the published set until cond holds for its members.
func waitMembers(ctx context.Context, c *sandbox.Cluster, key types.NamespacedName, timeout time.Duration, what string, cond func([]string) bool) error {
	deadline := time.Now().Add(timeout)
	var last []string
	for {
		s, err := PublishedSet(ctx, c.Client, key)
		if err != nil {
			return err
		}
		last = Members(s)
		if s != nil && cond(last) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s; the set is %v", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
