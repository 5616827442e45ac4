package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"rebound/pkg/liveness"
)

// TestVerdictMetrics: the verdict counts follow each pass, and a death's
// detection time is observed once however many passes see it, and again
// only after the node came back and died anew.
func TestVerdictMetrics(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	dead := liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, LeaseRenewSeen: now.Add(-5 * time.Second), DetectedAt: now.Add(-time.Second)}
	var m verdictMetrics
	count := func() uint64 {
		var out dto.Metric
		if err := detectionSeconds.Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetHistogram().GetSampleCount()
	}
	start := count()
	for range 3 {
		m.observe(liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{"a": dead, "b": {Verdict: liveness.Alive}}}, now)
	}
	if got := count() - start; got != 1 {
		t.Fatalf("three passes over one death observed %d detections, want 1", got)
	}
	if got := testutil.ToFloat64(nodeVerdicts.WithLabelValues("Dead", "true")); got != 1 {
		t.Errorf("rebound_node_verdict{Dead,early} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(nodeVerdicts.WithLabelValues("Alive", "false")); got != 1 {
		t.Errorf("rebound_node_verdict{Alive} = %v, want 1", got)
	}
	m.observe(liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{"a": {Verdict: liveness.Alive}}}, now)
	if got := testutil.ToFloat64(nodeVerdicts.WithLabelValues("Dead", "true")); got != 0 {
		t.Errorf("after the node came back rebound_node_verdict{Dead,early} = %v, want 0", got)
	}
	m.observe(liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{"a": dead}}, now)
	if got := count() - start; got != 2 {
		t.Fatalf("a second death observed %d detections in all, want 2", got)
	}
}

// TestWatcherMismatchLog: an agent on another --gossip-watchers than the
// controller's is logged once with both numbers, again only when its
// number changes or after it agreed in between, and counted every pass.
func TestWatcherMismatchLog(t *testing.T) {
	var lines []string
	ctx := logf.IntoContext(context.Background(), funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}))
	var w watcherMismatches
	b2 := liveness.WatcherMismatch{Reporter: "b", Agent: 2, Controller: 3}
	for _, step := range []struct {
		ms       []liveness.WatcherMismatch
		newLines int
	}{
		{ms: []liveness.WatcherMismatch{b2}, newLines: 1},
		{ms: []liveness.WatcherMismatch{b2}, newLines: 0},
		{ms: []liveness.WatcherMismatch{{Reporter: "b", Agent: 5, Controller: 3}}, newLines: 1},
		{ms: nil, newLines: 0},
		{ms: []liveness.WatcherMismatch{b2}, newLines: 1},
	} {
		before := len(lines)
		w.observe(ctx, step.ms)
		if got := len(lines) - before; got != step.newLines {
			t.Errorf("%+v: %d new log lines %q, want %d", step.ms, got, lines[before:], step.newLines)
		}
		if got := testutil.ToFloat64(gossipWatchersMismatched); got != float64(len(step.ms)) {
			t.Errorf("%+v: rebound_gossip_watchers_mismatched_agents = %v, want %d", step.ms, got, len(step.ms))
		}
	}
	if !strings.Contains(lines[0], "--gossip-watchers=2") || !strings.Contains(lines[0], "--gossip-watchers=3") {
		t.Errorf("log line %q does not name both flags' values", lines[0])
	}
}

// TestGossipDisagreementExport: a node in disagreement has its series (1)
// and one GossipPlaneDisagrees Event however many passes see it; the
// series goes when the disagreement ends, and a new episode gets a new
// Event; the cluster-wide hold is a gauge and one log line per change.
func TestGossipDisagreementExport(t *testing.T) {
	var lines []string
	ctx := logf.IntoContext(context.Background(), funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}))
	api := fake.NewClientset()
	d := disagreements{events: EventWriter(api)}
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, {ObjectMeta: metav1.ObjectMeta{Name: "y"}}}
	until := time.Date(2026, 3, 1, 12, 3, 0, 0, time.UTC)
	lying := liveness.Assessment{
		Disagreements: map[string]liveness.Disagreement{"x": {Reason: liveness.WatchersSayDead, Detail: "2 of its 3 gossip watchers (a, b) say Dead"}},
		Distrusted:    map[string]time.Time{"x": until},
	}
	series := func(node, reason string) int {
		return testutil.CollectAndCount(gossipDisagreement.MustCurryWith(prometheus.Labels{"node": node, "reason": reason}))
	}
	seen := 0
	drain := func() []string {
		evs, err := api.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs.Items[seen:] {
			out = append(out, e.Reason+": "+e.Message)
		}
		seen = len(evs.Items)
		return out
	}
	for range 3 {
		d.observe(ctx, nodes, lying)
	}
	if got := testutil.ToFloat64(gossipDisagreement.WithLabelValues("x", "WatchersSayDead")); got != 1 {
		t.Fatalf("rebound_gossip_disagreement{x,WatchersSayDead} = %v, want 1", got)
	}
	evs := drain()
	if len(evs) != 1 || !strings.Contains(evs[0], "GossipPlaneDisagrees") || !strings.Contains(evs[0], "not judged early, until 2026-03-01T12:03:00Z") {
		t.Fatalf("three passes recorded %q, want one GossipPlaneDisagrees Event saying until when it is held", evs)
	}
	d.observe(ctx, nodes, liveness.Assessment{})
	if n := series("x", "WatchersSayDead"); n != 0 {
		t.Fatalf("the disagreement ended but %d series remain", n)
	}
	d.observe(ctx, nodes, liveness.Assessment{Disagreements: map[string]liveness.Disagreement{"x": {Reason: liveness.MemberDown, Detail: "silent member"}}})
	if evs := drain(); len(evs) != 1 || !strings.Contains(evs[0], "MemberDown") {
		t.Fatalf("a new episode recorded %q, want one Event", evs)
	}
	before := len(lines)
	held := liveness.Assessment{Hold: liveness.Hold{Reason: liveness.HoldRestart, Until: until, Detail: "no history"}}
	d.observe(ctx, nodes, held)
	d.observe(ctx, nodes, held)
	if got := testutil.ToFloat64(earlyJudgementHeld.WithLabelValues(liveness.HoldRestart)); got != 1 {
		t.Errorf("rebound_early_judgement_held{Restart} = %v, want 1", got)
	}
	d.observe(ctx, nodes, liveness.Assessment{})
	if n := testutil.CollectAndCount(earlyJudgementHeld); n != 0 {
		t.Errorf("the hold ended but %d series remain", n)
	}
	var holdLines []string
	for _, l := range lines[before:] {
		if strings.Contains(l, "early judgement") {
			holdLines = append(holdLines, l)
		}
	}
	if len(holdLines) != 2 || !strings.Contains(holdLines[0], `"until"="2026-03-01T12:03:00Z"`) || !strings.Contains(holdLines[1], "no longer held") {
		t.Errorf("hold log lines %q, want one when it starts (with until) and one when it ends", holdLines)
	}
}
