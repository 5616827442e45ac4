package controller

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

// The metric names below, and those of peering_controller.go
// (rebound_peering_set_size, rebound_peering_frozen, ...), are what
// deploy/monitoring/alerts.yaml and docs/install.md refer to;
// TestAlertRules checks the alerts on them.
var (
	zoneStateGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_zone_state",
		Help: "Zone state as kube-controller-manager computes it (1 for the current state of each zone).",
	}, []string{"zone", "state"})
	zoneEvictionRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_zone_eviction_rate",
		Help: "NoExecute tainting rate (nodes per second) kube-controller-manager applies in the zone.",
	}, []string{"zone"})
	strandedPodsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_stranded_pods",
		Help: "Critical pods on NotReady nodes that upstream eviction will not move within maxUnavailableTime, by policy.",
	}, []string{"policy"})
	strandedDeadlineGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_stranded_oldest_deadline_timestamp_seconds",
		Help: "Earliest policy deadline (NotReady since + maxUnavailableTime, Unix seconds) of the critical pods still stranded and not replaced, by policy; absent when none.",
	}, []string{"policy"})
	waitingForFencingGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_waiting_for_fencing_pods",
		Help: "Stranded pods with identity or exclusive storage that wait for their node to be fenced, by policy.",
	}, []string{"policy"})
	heldPodsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_held_pods",
		Help: "Stranded pods rebound does not act on although a rule would allow it, by policy and decision: NoTarget (no Ready node admits the replacement) or Held (every node NotReady, or a fenced node that appears alive).",
	}, []string{"policy", "decision"})
	rescuesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rebound_rescues_total",
		Help: "Actions rebound took, by action and result (Succeeded, AlreadyDone, Refused, Failed, DryRun).",
	}, []string{"action", "result"})
	recoveryTriggers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rebound_recovery_triggers_total",
		Help: "Watch events that asked the recovery controller for a pass, by kind (bursts collapse into one pass).",
	}, []string{"kind"})
	planSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rebound_plan_duration_seconds",
		Help:    "Time to gather a snapshot and plan.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})

	nodeVerdicts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_node_verdict",
		Help: "Nodes by liveness verdict (Alive, CutOffFromAPI, Dead, Unknown); early=\"true\" counts the Dead nodes the API still has Ready, found dead on both the Lease and the gossip plane.",
	}, []string{"verdict", "early"})
	detectionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rebound_detection_seconds",
		Help:    "From the last Lease renewal rebound saw of a node to its two-plane Dead verdict, once per death: an upper bound on the time from death to detection.",
		Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 45, 60, 120},
	})

	gossipWatchersMismatched = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rebound_gossip_watchers_mismatched_agents",
		Help: "Agents whose fresh gossip read says they run with another --gossip-watchers than the controller's: their votes are not all heard, so early detection weakens; the controller's log names each.",
	})

	gossipDisagreement = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_gossip_disagreement",
		Help: "1 for each node on which the gossip plane disagrees with the Lease plane, by reason: WatchersSayDead (a quorum of its gossip watchers say Dead while its Lease renews on rebound's clock; its gossip plane is not trusted for --gossip-distrust-window) or MemberDown (Ready, its Lease renewing, but its gossip member missing, stale or silent while its host answers); the series is removed when the disagreement ends.",
	}, []string{"node", "reason"})
	earlyJudgementHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_early_judgement_held",
		Help: "1 while no node is judged dead early by its gossip plane, cluster-wide, by reason: Restart (no disagreement history yet, for one --gossip-distrust-window after the controller's start) or Share (more than --gossip-distrust-share of the Ready nodes distrusted at once); absent otherwise.",
	}, []string{"reason"})

	peerSetNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rebound_peering_nodes",
		Help: "Nodes the peering controller plans for (the set's candidates); rebound_peering_set_size below it means nodes are left out of the mesh.",
	}, []string{"controller"})
)

func init() {
	metrics.Registry.MustRegister(zoneStateGauge, zoneEvictionRate, strandedPodsGauge, strandedDeadlineGauge,
		waitingForFencingGauge, heldPodsGauge, rescuesTotal, recoveryTriggers, planSeconds, peerSetNodes,
		nodeVerdicts, detectionSeconds, gossipWatchersMismatched, gossipDisagreement, earlyJudgementHeld)
}

var allZoneStates = []zone.State{zone.Initial, zone.Normal, zone.PartialDisruption, zone.FullDisruption}

// observePlan publishes the plan's gauges.
func observePlan(p rescue.Plan) {
	zoneStateGauge.Reset()
	zoneEvictionRate.Reset()
	for _, z := range p.Zones.Zones {
		name := zone.DisplayZone(z.Zone)
		for _, st := range allZoneStates {
			v := 0.0
			if st == z.State {
				v = 1
			}
			zoneStateGauge.WithLabelValues(name, st.String()).Set(v)
		}
		zoneEvictionRate.WithLabelValues(name).Set(z.Rate)
	}
	strandedPodsGauge.Reset()
	waitingForFencingGauge.Reset()
	heldPodsGauge.Reset()
	for _, pr := range p.Policies {
		strandedPodsGauge.WithLabelValues(pr.Name).Set(float64(pr.Stranded))
		waitingForFencingGauge.WithLabelValues(pr.Name).Set(float64(pr.WaitingForFencing))
		heldPodsGauge.WithLabelValues(pr.Name, string(rescue.DecisionNoTarget)).Set(float64(pr.NoTarget))
		heldPodsGauge.WithLabelValues(pr.Name, string(rescue.DecisionHeld)).Set(float64(pr.Held))
	}
	strandedDeadlineGauge.Reset()
	for policy, d := range oldestStrandedDeadlines(p.Critical) {
		strandedDeadlineGauge.WithLabelValues(policy).Set(float64(d.Unix()))
	}
}

// oldestStrandedDeadlines returns, per policy, the earliest deadline of
// the pods still stranded: neither replaced nor skipped.
func oldestStrandedDeadlines(pods []rescue.CriticalPod) map[string]time.Time {
	out := map[string]time.Time{}
	for _, c := range pods {
		if !c.Stranded || c.Decision == rescue.DecisionReplaced || c.Decision == rescue.DecisionSkip {
			continue
		}
		if d, ok := out[c.Policy]; !ok || c.Deadline.Before(d) {
			out[c.Policy] = c.Deadline
		}
	}
	return out
}

// observePeeringNodes publishes how many nodes the peering controller
// plans for; with rebound_peering_set_size (peering_controller.go) it
// shows how many are left out of the mesh.
func observePeeringNodes(name string, res peering.Result) {
	nodes := 0
	for _, d := range res.Decisions {
		if d.Reason != peering.OutDeleted {
			nodes++
		}
	}
	peerSetNodes.WithLabelValues(name).Set(float64(nodes))
}

// verdictMetrics publishes the verdict counts and observes each two-plane
// death's detection time once: detected remembers, per node, the
// detection already observed.
type verdictMetrics struct {
	mu       sync.Mutex
	detected map[string]time.Time
}

func (m *verdictMetrics) observe(a liveness.Assessment, now time.Time) {
	counts := map[[2]string]int{}
	for _, v := range []liveness.Verdict{liveness.Alive, liveness.CutOffFromAPI, liveness.Dead, liveness.Unknown} {
		counts[[2]string{string(v), "false"}] = 0
	}
	counts[[2]string{string(liveness.Dead), "true"}] = 0
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.detected == nil {
		m.detected = map[string]time.Time{}
	}
	for name, v := range a.Nodes {
		counts[[2]string{string(v.Verdict), strconv.FormatBool(v.Early)}]++
		if v.Verdict != liveness.Dead || v.DetectedAt.IsZero() || v.LeaseRenewSeen.IsZero() {
			if v.Verdict != liveness.Dead {
				delete(m.detected, name)
			}
			continue
		}
		if seen, ok := m.detected[name]; ok && seen.Equal(v.DetectedAt) {
			continue
		}
		m.detected[name] = v.DetectedAt
		detectionSeconds.Observe(now.Sub(v.LeaseRenewSeen).Seconds())
	}
	for k, n := range counts {
		nodeVerdicts.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}
