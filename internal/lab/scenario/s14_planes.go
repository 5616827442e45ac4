package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/liveness"
)

// PlaneRecorder follows both planes of a sandbox and writes their
// changes to a timeline: each node's Lease (renewals seen, a stall, the
// renewals resuming), its Ready transitions, and every gossip watch of
// every PeeringReport as it changes state. It remembers every Dead watch
// it saw, so that a test can say no report ever voted one.
type PlaneRecorder struct {
	tl     *Timeline
	stale  time.Duration
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	renewals map[string]int
	renewed  map[string]time.Time // the Lease's last renewTime seen
	stalled  map[string]bool
	ready    map[string]bool
	watches  map[string]map[string]string // reporter → node → state
	dead     []DeadVote
}

// DeadVote is one report's Dead watch, as the recorder first saw it.
type DeadVote struct {
	Reporter, Node string
	// At is on the recorder's timeline.
	At time.Duration
}

func (v DeadVote) String() string {
	return fmt.Sprintf("%s votes %s Dead (+%.1fs)", v.Reporter, v.Node, v.At.Seconds())
}

// planeTick is how often the recorder reads both planes.
const planeTick = 250 * time.Millisecond

// RecordPlanes starts recording c's planes on tl until Stop. A Lease is
// called stalled once it has not been renewed for two renew intervals.
func RecordPlanes(ctx context.Context, c *sandbox.Cluster, tl *Timeline) (*PlaneRecorder, error) {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &PlaneRecorder{tl: tl, stale: c.Timings.NodeLeaseDuration / 2, cancel: cancel, done: make(chan struct{}),
		renewals: map[string]int{}, renewed: map[string]time.Time{}, stalled: map[string]bool{}, ready: map[string]bool{},
		watches: map[string]map[string]string{}}
	go func() {
		defer close(r.done)
		t := time.NewTicker(planeTick)
		defer t.Stop()
		for {
			r.readLeases(ctx, c)
			r.readNodes(ctx, c)
			var reports v1alpha1.PeeringReportList
			if err := cl.List(ctx, &reports); err == nil {
				r.readReports(reports.Items)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return r, nil
}

func (r *PlaneRecorder) readLeases(ctx context.Context, c *sandbox.Cluster) {
	l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, lease := range l.Items {
		r.lease(lease, now)
	}
}

func (r *PlaneRecorder) lease(lease coordinationv1.Lease, now time.Time) {
	n := lease.Name
	if lease.Spec.RenewTime == nil {
		return
	}
	at := lease.Spec.RenewTime.Time
	prev, seen := r.renewed[n]
	if seen && at.After(prev) {
		r.renewals[n]++
		if r.stalled[n] {
			r.stalled[n] = false
			r.tl.Add("lease", n, "renewed again after a %.1fs gap (renewals seen: %d)", at.Sub(prev).Seconds(), r.renewals[n])
		}
	}
	if !seen || at.After(prev) {
		r.renewed[n] = at
	}
	if !r.stalled[n] && now.Sub(r.renewed[n]) > r.stale {
		r.stalled[n] = true
		r.tl.Add("lease", n, "stalled: last renewed %.1fs ago (renewals seen: %d)", now.Sub(r.renewed[n]).Seconds(), r.renewals[n])
	}
}

func (r *PlaneRecorder) readNodes(ctx context.Context, c *sandbox.Cluster) {
	l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range l.Items {
		n := &l.Items[i]
		ready := kubestatus.NodeReady(n)
		if prev, seen := r.ready[n.Name]; !seen || prev != ready {
			r.ready[n.Name] = ready
			if seen {
				r.tl.Add("node", n.Name, "Ready=%v", ready)
			}
		}
	}
}

func (r *PlaneRecorder) readReports(reports []v1alpha1.PeeringReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range reports {
		if rep.Gossip == nil {
			continue
		}
		w := r.watches[rep.Name]
		if w == nil {
			w = map[string]string{}
			r.watches[rep.Name] = w
		}
		for _, watch := range rep.Gossip.Watches {
			if prev := w[watch.Node]; prev != watch.State {
				w[watch.Node] = watch.State
				from := prev
				if from == "" {
					from = "(none)"
				}
				r.tl.Add("gossip", rep.Name, "watches %s: %s → %s (members %d)", watch.Node, from, watch.State, rep.Gossip.Members)
				if watch.State == string(liveness.GossipDead) {
					r.dead = append(r.dead, DeadVote{Reporter: rep.Name, Node: watch.Node, At: r.tl.Since()})
				}
			}
		}
	}
}

// DeadVotes are the Dead watches seen about node ("" for any node).
func (r *PlaneRecorder) DeadVotes(node string) []DeadVote {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []DeadVote
	for _, v := range r.dead {
		if node == "" || v.Node == node {
			out = append(out, v)
		}
	}
	return out
}

// Watches are the states the reporters' watches hold now about node, by
// reporter.
func (r *PlaneRecorder) Watches(node string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for rep, w := range r.watches {
		if s, ok := w[node]; ok {
			out[rep] = s
		}
	}
	return out
}

// Stop stops recording and writes each Lease's renewals seen.
func (r *PlaneRecorder) Stop() {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	nodes := make([]string, 0, len(r.renewals))
	for n := range r.renewed {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		r.tl.Add("lease", n, "renewals seen while recording: %d", r.renewals[n])
	}
}

// EarlyActions are what rebound's controller (sandbox.ReboundUser) did
// to nodes and pods at or after from, as the apiserver's audit log has
// it: Node writes (its taints), pod status writes (pods marked not
// ready) and pod deletions that succeeded.
func EarlyActions(c *sandbox.Cluster, from time.Time) ([]sandbox.AuditEvent, error) {
	return c.AuditEvents(func(e sandbox.AuditEvent) bool {
		if e.User.Username != sandbox.ReboundUser || e.ResponseStatus.Code >= 300 || e.StageTimestamp.Time.Before(from) {
			return false
		}
		write := e.Verb == "patch" || e.Verb == "update"
		switch o := e.ObjectRef; {
		case o.Resource == "nodes" && o.Subresource == "" && (write || e.Verb == "delete"):
			return true
		case o.Resource == "pods" && o.Subresource == "status" && write:
			return true
		case o.Resource == "pods" && o.Subresource == "" && e.Verb == "delete":
			return true
		}
		return false
	})
}

// DescribeActions is one line per audited action.
func DescribeActions(evs []sandbox.AuditEvent) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		o := e.ObjectRef
		name := o.Name
		if o.Namespace != "" {
			name = o.Namespace + "/" + name
		}
		if o.Subresource != "" {
			name += "/" + o.Subresource
		}
		out = append(out, fmt.Sprintf("%s %s %s (%d) at %s", e.Verb, o.Resource, name, e.ResponseStatus.Code, e.StageTimestamp.Format("15:04:05.000")))
	}
	return out
}
