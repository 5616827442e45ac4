package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"rebound/api/v1alpha1"
	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// LivenessVerdicts gives the recovery planner its verdicts
// (RecoveryOptions.Liveness): the clocks of the process's one
// liveness.Tracker, which the peering planner shares; the Lease plane of
// leases (nil: none); and, when reports is set (agents report: their BGP
// sessions where peering runs, their gossip where they gossip), the
// agents' PeeringReports from the manager's cache. When the reports
// cannot be read the verdicts rest on the API alone, the safe side: no
// NotReady node counts as alive, and none as dead by the network's word.
func LivenessVerdicts(reports client.Reader, tracker *liveness.Tracker, leases *liveness.LeaseTracker, opts liveness.Options) func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment {
	var (
		metrics    verdictMetrics
		mismatches watcherMismatches
	)
	return func(ctx context.Context, nodes []*corev1.Node, now time.Time) liveness.Assessment {
		firstSeen := tracker.Observe(kube.LivenessNodes(nodes), now)
		var list v1alpha1.PeeringReportList
		if reports != nil {
			if err := reports.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
				logf.FromContext(ctx).Info("PeeringReports unreadable: verdicts from the API alone this pass", "error", err.Error())
				list.Items = nil
			}
		}
		rs := kube.ReadableReports(list.Items)
		a := kube.AssessReports(nodes, rs, firstSeen, leases.Leases(), now, opts)
		metrics.observe(a, now)
		mismatches.observe(ctx, opts.WatcherMismatches(rs, now))
		return a
	}
}

// watcherMismatches says, once per agent and number, which agents gossip
// with another --gossip-watchers than the controller's: their votes are
// partly not heard, so early detection weakens without any other sign.
// Every pass sets rebound_gossip_watchers_mismatched_agents.
type watcherMismatches struct {
	mu     sync.Mutex
	logged map[string]int // reporter -> the agent's number last logged
}

func (w *watcherMismatches) observe(ctx context.Context, ms []liveness.WatcherMismatch) {
	gossipWatchersMismatched.Set(float64(len(ms)))
	w.mu.Lock()
	defer w.mu.Unlock()
	now := make(map[string]int, len(ms))
	for _, m := range ms {
		now[m.Reporter] = m.Agent
		if k, ok := w.logged[m.Reporter]; ok && k == m.Agent {
			continue
		}
		logf.FromContext(ctx).Error(m, "gossip watchers differ: this agent's votes are not all heard", "node", m.Reporter, "agentWatchers", m.Agent, "controllerWatchers", m.Controller)
	}
	w.logged = now
}
