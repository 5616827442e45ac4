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
// yet shows the mark to come; a marked node now NotReady whose verdict
// left Dead shows the mark kept, and why.
func TestExplainUnreachable(t *testing.T) {
	w := newWorld(at(20 * time.Second))
	// Six nodes: with node-2 NotReady and node-3 marked, node-4 is the
	// third out, within half.
	w.cluster(6)
	marked, _ := unreachable.WithTaint(nil, metav1.NewTime(at(5*time.Second)))
	w.nodeNamed("node-3").Spec.Taints = marked
	old, _ := unreachable.WithTaint(nil, metav1.NewTime(at(-2*time.Minute)))
	w.nodeNamed("node-1").Spec.Taints = old
	p := w.pod("kube-system", "coredns-1", "node-3", true, "", "")
	p.Status.Conditions = []corev1.PodCondition{unreachable.NotReadyCondition("node-3", metav1.NewTime(at(5*time.Second)))}
	w.pod("kube-system", "coredns-2", "node-3", true, "", "")
	dead := liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: at(4 * time.Second), Reason: "Ready in the API, but dead on both planes"}
	// node-2 was marked, then went NotReady; the verdict left Dead: the
	// mark stays, dating the incident.
	n2 := w.nodeNamed("node-2")
	n2.Spec.Taints = old
	for i := range n2.Status.Conditions {
		if n2.Status.Conditions[i].Type == corev1.NodeReady {
			n2.Status.Conditions[i].Status = corev1.ConditionUnknown
		}
	}
	w.s.Verdicts = map[string]liveness.NodeVerdict{"node-0": {Verdict: liveness.Alive}, "node-1": {Verdict: liveness.Alive, Reason: "Ready in the API"},
		"node-2": {Verdict: liveness.Unknown, Reason: "NotReady"}, "node-3": dead, "node-4": dead}

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
	if u := got["node-2"]; !u.Marked || u.Plan != "Keep" || !strings.Contains(u.Reason, "NotReady in the API: the mark stays until the node is Ready again") {
		t.Errorf("node-2: %+v", u)
	}
	if len(r.Unreachable) != 4 {
		t.Errorf("unreachable = %+v, want nodes 1, 2, 3 and 4", r.Unreachable)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "node-3: marked since") || !strings.Contains(buf.String(), "1 pod(s) marked not ready; Keep") {
		t.Errorf("text lacks the marks:\n%s", buf.String())
	}
}
