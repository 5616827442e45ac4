package restore

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"rebound/pkg/rescue"
)

// TestBringupReportsNoTarget: the bring-up plans with pkg/rescue, so the
// rule "act only where the replacement can run" holds here too. With the
// only Ready node cordoned it deletes nothing and reports NoTarget; with no
// Ready node at all it reports the full-disruption hold.
func TestBringupReportsNoTarget(t *testing.T) {
	cordoned := node("node-0", true)
	cordoned.Spec.Unschedulable = true
	down := node("node-0", false)
	for _, tc := range []struct {
		name     string
		node0    *corev1.Node
		decision rescue.Decision
		reason   string
	}{
		{"only Ready node cordoned", cordoned, rescue.DecisionNoTarget, "cordoned (spec.unschedulable): node-0"},
		{"no Ready node", down, rescue.DecisionHeld, "every node is NotReady (2 of 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := cluster(node("node-3", false), strandedDeployment()...)
			// cluster() adds a Ready node-0; the case's node-0 replaces it.
			if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), tc.node0, ""); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			res, err := run(t, client, Options{Selection: Selection{Workloads: []WorkloadRef{coredns}}, Progress: &out})
			if err != nil {
				t.Fatal(err)
			}
			if w := writes(client); len(w) != 0 {
				t.Errorf("writes = %v, want none", w)
			}
			if len(res.Stranded) != 1 || res.Stranded[0].Decision != tc.decision || !strings.Contains(res.Stranded[0].Reason, tc.reason) {
				t.Errorf("stranded = %+v, want %s with %q", res.Stranded, tc.decision, tc.reason)
			}
			if !strings.Contains(out.String(), string(tc.decision)) {
				t.Errorf("progress does not report %s:\n%s", tc.decision, out.String())
			}
		})
	}
}
