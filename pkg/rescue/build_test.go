package rescue

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/pkg/liveness"
	"rebound/pkg/zone"
)

// buildSources are three nodes, c NotReady for a minute, with every
// liveness signal: a's report of a session with c re-established after
// c's transition (first-hand life), and the Leases.
func buildSources(now time.Time) Sources {
	node := func(name string, ready corev1.ConditionStatus, since time.Time) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since)},
		}}}
	}
	return Sources{
		Now:   now,
		Nodes: []*corev1.Node{node("a", corev1.ConditionTrue, now.Add(-time.Hour)), node("b", corev1.ConditionTrue, now.Add(-time.Hour)), node("c", corev1.ConditionUnknown, now.Add(-time.Minute))},
		Liveness: LivenessSignals{
			Reports: []liveness.Report{
				{Reporter: "a", ObservedAt: now.Add(-5 * time.Second), Sessions: []liveness.Session{{Peer: "c", State: liveness.StateEstablished, Since: now.Add(-30 * time.Second)}}},
			},
			Leases:          map[string]liveness.Lease{"a": {RenewSeen: now.Add(-3 * time.Second), RenewInterval: 10 * time.Second}},
			LeaseRenewTimes: map[string]time.Time{"a": now.Add(-3 * time.Second), "c": now.Add(-2 * time.Minute)},
			FirstSeen:       map[string]time.Time{"a": now.Add(-time.Hour), "b": now.Add(-time.Hour), "c": now.Add(-time.Minute)},
		},
	}
}

// TestBuildFillsEveryLivenessInput: from the same objects, Build fills
// the verdicts from the Ready conditions, the reports and the Leases, the
// Lease renew times, and the defaults.
func TestBuildFillsEveryLivenessInput(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	src := buildSources(now)
	s, a := Build(src)

	if len(s.Verdicts) != 3 {
		t.Fatalf("verdicts %v, want one per node", s.Verdicts)
	}
	// The report: without it c would be Unknown.
	if v := s.Verdicts["c"]; v.Verdict != liveness.CutOffFromAPI {
		t.Errorf("c: %s (%s), want CutOffFromAPI from a's report", v.Verdict, v.Reason)
	}
	// The Lease plane.
	if v := s.Verdicts["a"]; v.Verdict != liveness.Alive || !v.LeaseRenewSeen.Equal(now.Add(-3*time.Second)) {
		t.Errorf("a: %+v, want Alive with the Lease renewal seen", v)
	}
	if len(s.LeaseRenewTimes) != 2 || !s.LeaseRenewTimes["c"].Equal(now.Add(-2*time.Minute)) {
		t.Errorf("LeaseRenewTimes %v, want the Leases' renew times", s.LeaseRenewTimes)
	}
	if a.StaleAt.IsZero() {
		t.Error("StaleAt is zero: the report that decided c's verdict ages out")
	}
	if s.ZoneConfig != zone.DefaultConfig() || s.Defaults.ReplacementTimeout != DefaultReplacementTimeout || s.Namespaces == nil {
		t.Errorf("zone config %+v, defaults %+v, namespaces %v: want the defaults", s.ZoneConfig, s.Defaults, s.Namespaces)
	}

	// The signals alone decide: without the report c is Unknown, so a
	// builder that dropped them would be seen.
	src.Liveness.Reports = nil
	if s, _ := Build(src); s.Verdicts["c"].Verdict != liveness.Unknown {
		t.Errorf("c without reports: %s, want Unknown", s.Verdicts["c"].Verdict)
	}

	// A caller's own judge (the controller's) replaces the model's call,
	// and its verdicts are the snapshot's.
	src.Liveness.Assess = func(nodes []*corev1.Node, _ time.Time) liveness.Assessment {
		return liveness.Assessment{Nodes: map[string]liveness.NodeVerdict{"c": {Verdict: liveness.Dead}}}
	}
	if s, _ := Build(src); s.Verdicts["c"].Verdict != liveness.Dead {
		t.Errorf("c with the caller's judge: %s, want Dead", s.Verdicts["c"].Verdict)
	}
}
