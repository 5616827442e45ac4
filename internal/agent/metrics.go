package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The agent's /metrics, read from its state at scrape time, so that the
// work loop needs no metric calls. Every series carries the node's name:
// the alerts (deploy/monitoring/alerts.yaml) name the node, and a
// PodMonitor on a hostNetwork DaemonSet would otherwise only give the pod.
var (
	descPeers = prometheus.NewDesc("rebound_agent_peers",
		"Peers in the set as last applied to BIRD (this node excluded).", []string{"node"}, nil)
	descSessions = prometheus.NewDesc("rebound_agent_sessions",
		"BGP sessions with the peers of the set, by BIRD state, as last read.", []string{"node", "state"}, nil)
	descReloads = prometheus.NewDesc("rebound_agent_reloads_total",
		"Syncs of the peer set to BIRD, by outcome (reloaded, unchanged, rejected, unreachable).", []string{"node", "outcome"}, nil)
	descRejected = prometheus.NewDesc("rebound_agent_config_rejected_total",
		"Configurations BIRD refused; the last good one was kept.", []string{"node"}, nil)
	descRefused = prometheus.NewDesc("rebound_agent_peer_set_refused_total",
		"Published peer sets the agent did not apply (unreadable, empty, below their floor); BIRD kept the last good peers.", []string{"node"}, nil)
	descLastSync = prometheus.NewDesc("rebound_agent_last_sync_timestamp_seconds",
		"When BIRD last had the current peer set (reloaded or already unchanged), Unix seconds.", []string{"node"}, nil)
	descBIRDUp = prometheus.NewDesc("rebound_agent_bird_up",
		"1 when BIRD answered on its control socket at the last attempt, 0 when it did not.", []string{"node"}, nil)
)

type agentCollector struct{ a *Agent }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPeers, descSessions, descReloads, descRejected, descRefused, descLastSync, descBIRDUp} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	st, peers, status := a.stats, len(a.peers), a.status
	a.mu.Unlock()
	node := a.opts.NodeName

	ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(peers), node)
	for outcome, n := range map[string]int{"reloaded": st.Reloads, "unchanged": st.Unchanged, "rejected": st.Rejected, "unreachable": st.Unreachable} {
		ch <- prometheus.MustNewConstMetric(descReloads, prometheus.CounterValue, float64(n), node, outcome)
	}
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(st.Rejected), node)
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.Refused), node)
	if !st.LastSync.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLastSync, prometheus.GaugeValue, float64(st.LastSync.UnixNano())/1e9, node)
	}
	if up, known := birdUp(status, st); known {
		v := 0.0
		if up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descBIRDUp, prometheus.GaugeValue, v, node)
	}
	if status != nil && status.err == "" {
		byState := map[string]int{}
		for _, s := range status.states {
			byState[s]++
		}
		for s, n := range byState {
			ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(n), node, s)
		}
	}
}

// birdUp says whether BIRD answered at the last attempt: the last session
// read if there was one, else the syncs (a reload that could not reach
// BIRD). Unknown before either happened.
func birdUp(status *sessionView, st Stats) (up, known bool) {
	if status != nil {
		return status.err == "", true
	}
	if st.Unreachable > 0 {
		return false, true
	}
	if st.Reloads+st.Rejected+st.Unchanged > 0 {
		return true, true
	}
	return false, false
}

// Collector reads the agent's metrics at scrape time. `rebound agent`
// registers it with controller-runtime's registry, which its metrics
// server (package metricsserving: HTTPS, authenticated) serves together
// with the Go runtime's and the process's.
func (a *Agent) Collector() prometheus.Collector { return agentCollector{a} }
