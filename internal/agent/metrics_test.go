package agent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"rebound/pkg/peering/bird"
)

func scrape(t *testing.T, a *Agent) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collector())
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d", rec.Code)
	}
	return rec.Body.String()
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, "\n"+l+"\n") {
			t.Errorf("/metrics lacks %q", l)
		}
	}
}

func TestAgentMetrics(t *testing.T) {
	h := startHarness(t,
		node("node-a", "10.0.0.1", true),
		node("node-b", "10.0.0.2", true),
		node("node-c", "10.0.0.3", true),
	)
	h.bird.protos = []bird.Protocol{
		{Name: "Mesh_10_0_0_2", Proto: "BGP", State: "up", Info: "Established"},
		{Name: "Mesh_10_0_0_3", Proto: "BGP", State: "start", Info: "Active"},
	}
	h.waitFor("loop running", func() bool { return h.clock.HasWaiters() })
	if body := scrape(t, h.agent); strings.Contains(body, "rebound_agent_bird_up{") || strings.Contains(body, "rebound_agent_last_sync_timestamp_seconds{") {
		t.Errorf("before the first sync BIRD's state and the last sync are unknown, got:\n%s", body)
	}
	h.stepTimer(time.Second)
	h.waitFor("first reload and report", func() bool { return h.agent.Stats().Reports == 1 })
	body := scrape(t, h.agent)
	wantLines(t, body,
		`rebound_agent_peers{node="node-a"} 2`,
		`rebound_agent_reloads_total{node="node-a",outcome="reloaded"} 1`,
		`rebound_agent_config_rejected_total{node="node-a"} 0`,
		`rebound_agent_bird_up{node="node-a"} 1`,
		`rebound_agent_sessions{node="node-a",state="Established"} 1`,
		`rebound_agent_sessions{node="node-a",state="Active"} 1`,
	)
	if !strings.Contains(body, `rebound_agent_last_sync_timestamp_seconds{node="node-a"} `) {
		t.Error("/metrics lacks the last sync time after a reload")
	}
}

func TestAgentMetricsBirdUnreachable(t *testing.T) {
	h := startHarness(t, node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true))
	h.bird.errs = []error{&bird.UnreachableError{Socket: "/run/bird.ctl", Err: io.EOF}}
	h.stepTimer(time.Second)
	h.waitFor("failed reload", func() bool { return h.agent.Stats().Unreachable == 1 })
	wantLines(t, scrape(t, h.agent),
		`rebound_agent_bird_up{node="node-a"} 0`,
		`rebound_agent_reloads_total{node="node-a",outcome="unreachable"} 1`,
	)
}

// The probe port is plain HTTP for the kubelet: /metrics must not be on it
// (it is served apart, authenticated).
func TestProbeHandlerServesNoMetrics(t *testing.T) {
	h := startHarness(t, node("node-a", "10.0.0.1", true), node("node-b", "10.0.0.2", true))
	rec := httptest.NewRecorder()
	h.agent.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics on the probe handler = %d, want 404:\n%.300s", rec.Code, rec.Body.String())
	}
}
