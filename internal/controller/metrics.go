package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

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
	planSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rebound_plan_duration_seconds",
		Help:    "Time to gather a snapshot and plan.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
)

func init() {
	metrics.Registry.MustRegister(zoneStateGauge, zoneEvictionRate, strandedPodsGauge, waitingForFencingGauge, heldPodsGauge, rescuesTotal, planSeconds)
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
}
