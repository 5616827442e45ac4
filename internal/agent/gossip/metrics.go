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
		"Members this agent watches, by what its own probes say of them: Alive (the member answers), MemberDown (it does not, its host does: no vote), Dead (neither), Unknown (not probed yet, or not probeable: no address in the API).", []string{"node", "state"}, nil)
	descWitnessed = prometheus.NewDesc("rebound_agent_gossip_witnessed_members",
		"Nodes whose Lease is stale on this agent's clock and that this agent witnesses (it reaches the API, and is one of the first --gossip-watchers members after their ring watchers whose Lease renews), by what its own probes say of them: Alive, MemberDown, Dead, Unknown (not probed yet, or not probeable).", []string{"node", "state"}, nil)
	descRefused = prometheus.NewDesc("rebound_agent_gossip_refused_members_total",
		"Alive announcements this agent's membership refused, by reason: UnknownToTheAPI (no EndpointSlice entry of the gossip Service for that node), AddressDiffers (announced at another address than the API's). A few during a rollout are the API catching up; a steady rise is a member that is not where the API says, or a forger.", []string{"node", "reason"}, nil)
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
	for _, d := range []*prometheus.Desc{descMembers, descWatched, descWitnessed, descBytes, descProbeFailures, descDepartures, descWrites, descRefused} {
		ch <- d
	}
}

// Collect is prometheus.Collector's.
func (m *Member) Collect(ch chan<- prometheus.Metric) {
	alive := m.ml.NumMembers()
	m.mu.Lock()
	st, watched, witnessed := m.stats, counts(m.t.watches), counts(m.t.witnesses)
	m.mu.Unlock()
	tr := m.Traffic()
	node := m.cfg.NodeName

	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(alive), node)
	for state, n := range watched {
		ch <- prometheus.MustNewConstMetric(descWatched, prometheus.GaugeValue, float64(n), node, state)
	}
	for state, n := range witnessed {
		ch <- prometheus.MustNewConstMetric(descWitnessed, prometheus.GaugeValue, float64(n), node, state)
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
	for reason, n := range m.refused.snapshot() {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), node, reason)
	}
}

var _ prometheus.Collector = (*Member)(nil)
