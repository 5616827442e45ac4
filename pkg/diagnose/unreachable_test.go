package diagnose

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/pkg/liveness"
	"rebound/pkg/unreachable"
)

// TestExplainUnreachable: a node rebound marked and still dead shows with
// its mark's time and the pods marked not ready; a marked node alive
// again shows the mark coming off; a node dead on both planes not marked
// yet shows the mark to come.
func TestExplainUnreachable(t *testing.T) {
	w := newWorld(at(20 * time.Second))
	w.cluster(5)
	marked, _ := unreachable.WithTaint(nil, metav1.NewTime(at(5*time.Second)))
	w.nodeNamed("node-3").Spec.Taints = marked
	old, _ := unreachable.WithTaint(nil, metav1.NewTime(at(-2*time.Minute)))
	w.nodeNamed("node-1").Spec.Taints = old
	p := w.pod("kube-system", "coredns-1", "node-3", true, "", "")
	p.Status.Conditions = []corev1.PodCondition{unreachable.NotReadyCondition("node-3", metav1.NewTime(at(5*time.Second)))}
	w.pod("kube-system", "coredns-2", "node-3", true, "", "")
	dead := liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: at(4 * time.Second), Reason: "Ready in the API, but dead on both planes"}
	w.s.Verdicts = map[string]liveness.NodeVerdict{"node-0": {Verdict: liveness.Alive}, "node-1": {Verdict: liveness.Alive, Reason: "Ready in the API"},
		"node-2": {Verdict: liveness.Alive}, "node-3": dead, "node-4": dead}

	r := w.explain()
	got := map[string]UnreachableNode{}
	for _, u := range r.Unreachable {
		got[u.Node] = u
	}
	if u := got["node-3"]; !u.Marked || u.Plan != "Keep" || u.PodsMarkedNotReady != 1 || u.Since == nil || !u.Since.Equal(at(5*time.Second)) {
		t.Errorf("node-3: %+v", u)
	}
	if u := got["node-1"]; !u.Marked || u.Plan != string(unreachable.RemoveTaint) || !strings.Contains(u.Reason, "no longer dead") {
		t.Errorf("node-1: %+v", u)
	}
	if u := got["node-4"]; u.Marked || u.Plan != string(unreachable.AddTaint) {
		t.Errorf("node-4: %+v", u)
	}
	if len(r.Unreachable) != 3 {
		t.Errorf("unreachable = %+v, want nodes 1, 3 and 4", r.Unreachable)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "node-3: marked since") || !strings.Contains(buf.String(), "1 pod(s) marked not ready; Keep") {
		t.Errorf("text lacks the marks:\n%s", buf.String())
	}
}
