package gossip

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The gossip member's /metrics, read from its state at scrape time like
// the agent's (internal/agent/metrics.go), each series with the node's
// name.
var (
	descMembers = prometheus.NewDesc("rebound_agent_gossip_members",
		"Members alive in this agent's gossip membership, itself included.", []string{"node"}, nil)
	descWatched = prometheus.NewDesc("rebound_agent_gossip_watched_members",
		"Members this agent watches, by what its own direct probes say of them (Alive, Dead, or Unknown until probed).", []string{"node", "state"}, nil)
	descBytes = prometheus.NewDesc("rebound_agent_gossip_bytes_total",
		"Gossip bytes, by direction (sent, received) and kind (packet: probes and gossip over UDP; stream: push/pull and joins over TCP).", []string{"node", "direction", "kind"}, nil)
	descProbeFailures = prometheus.NewDesc("rebound_agent_gossip_probe_failures_total",
		"This agent's own direct probes of members the membership had dead that went unanswered.", []string{"node"}, nil)
	descDepartures = prometheus.NewDesc("rebound_agent_gossip_departures_total",
		"Members the membership declared dead or left, as this agent heard it; many with no node gone are false suspicions (a starved or lossy node).", []string{"node"}, nil)
	descWrites = prometheus.NewDesc("rebound_agent_gossip_report_writes_total",
		"Writes of the gossip read to this node's PeeringReport, by outcome (written, failed).", []string{"node", "outcome"}, nil)
)

// Describe is prometheus.Collector's.
func (m *Member) Describe(ch chan<- *prometheus.Desc) { DescribeMetrics(ch) }

// DescribeMetrics sends the descriptions of a Member's metrics: an agent
// that creates its member only once it knows its address registers them
// before.
func DescribeMetrics(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMembers, descWatched, descBytes, descProbeFailures, descDepartures, descWrites} {
		ch <- d
	}
}

// Collect is prometheus.Collector's.
func (m *Member) Collect(ch chan<- prometheus.Metric) {
	alive := m.ml.NumMembers()
	m.mu.Lock()
	st, counts := m.stats, m.t.counts()
	m.mu.Unlock()
	tr := m.Traffic()
	node := m.cfg.NodeName

	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(alive), node)
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(descWatched, prometheus.GaugeValue, float64(n), node, state)
	}
	for _, b := range []struct {
		dir, kind string
		v         uint64
	}{
		{"sent", "packet", tr.PacketBytesSent}, {"received", "packet", tr.PacketBytesReceived},
		{"sent", "stream", tr.StreamBytesSent}, {"received", "stream", tr.StreamBytesReceived},
	} {
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(b.v), node, b.dir, b.kind)
	}
	ch <- prometheus.MustNewConstMetric(descProbeFailures, prometheus.CounterValue, float64(st.probeFailures), node)
	ch <- prometheus.MustNewConstMetric(descDepartures, prometheus.CounterValue, float64(st.departures), node)
	ch <- prometheus.MustNewConstMetric(descWrites, prometheus.CounterValue, float64(st.writes), node, "written")
	ch <- prometheus.MustNewConstMetric(descWrites, prometheus.CounterValue, float64(st.writeFailures), node, "failed")
}

var _ prometheus.Collector = (*Member)(nil)
