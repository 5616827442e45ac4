package diagnose

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
)

// TestDiagnoseCalicoAPIGroup: diagnose reads where the controller writes
// its Calico BGPPeer, and why, from the published peer set's annotations,
// and says it in the text and the JSON; a controller that could choose no
// group is a finding.
func TestDiagnoseCalicoAPIGroup(t *testing.T) {
	const bothServed = "auto: both groups are served, and calico-node's confd then reads crd.projectcalico.org/v1"
	const unserved = "calico API group projectcalico.org/v3 is set explicitly (controller --calico-api-group), but the API server does not serve projectcalico.org"
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		text        string // in the text; "" for nothing about Calico
		json        string // in the JSON; "" for no calico key
		finding     bool
	}{
		{"v1, both served", map[string]string{calico.AnnotationAPIGroup: calico.APIGroupV1, calico.AnnotationAPIGroupReason: bothServed},
			"Calico BGPPeer written to crd.projectcalico.org/v1: auto: both groups are served", `"calico":{"apiGroup":"crd.projectcalico.org/v1","reason":"auto: both groups`, false},
		{"no group", map[string]string{calico.AnnotationAPIGroup: "", calico.AnnotationAPIGroupReason: unserved},
			"Calico BGPPeer written nowhere: calico API group projectcalico.org/v3 is set explicitly", `"calico":{"apiGroup":"","reason":"calico API group projectcalico.org/v3`, true},
		{"no Calico backend", nil, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName, Annotations: tc.annotations}}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0", Labels: map[string]string{peering.LabelInSet: "true"}}}
			_, _, c := fakeClients(cm, node)
			s, x, err := Gather(context.Background(), c, t0)
			if err != nil {
				t.Fatal(err)
			}
			r := Explain(s, x)
			var text, js bytes.Buffer
			if err := WriteText(&text, r); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, r); err != nil {
				t.Fatal(err)
			}
			flat := strings.Join(strings.Fields(text.String()), " ")
			if tc.text == "" {
				if strings.Contains(flat, "Calico BGPPeer") || strings.Contains(js.String(), `"calico"`) || r.BGP.Calico != nil {
					t.Errorf("no Calico backend, yet the report speaks of it: %+v\n%s", r.BGP.Calico, text.String())
				}
				return
			}
			if !strings.Contains(flat, tc.text) {
				t.Errorf("text lacks %q:\n%s", tc.text, text.String())
			}
			if compact := strings.Join(strings.Fields(js.String()), ""); !strings.Contains(compact, strings.ReplaceAll(tc.json, " ", "")) {
				t.Errorf("JSON lacks %s:\n%s", tc.json, js.String())
			}
			found := false
			for _, f := range r.Findings {
				found = found || f.Kind == "CalicoNoBGPPeer"
			}
			if found != tc.finding {
				t.Errorf("finding CalicoNoBGPPeer = %v, want %v: %+v", found, tc.finding, r.Findings)
			}
		})
	}
}
