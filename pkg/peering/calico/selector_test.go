package calico

import (
	"testing"

	"rebound/pkg/peering"
)

// TestSelects: Calico's selector semantics, as libcalico-go's parser
// evaluates them (lib/selector/parser): a != or not-in test matches a node
// without the label, every other test of a label needs it.
func TestSelects(t *testing.T) {
	none := map[string]string{}
	in := map[string]string{peering.LabelInSet: "true"}
	out := map[string]string{peering.LabelInSet: "false"}
	other := map[string]string{peering.LabelInSet: "maybe", "zone": "a"}
	for _, tc := range []struct {
		sel    string
		labels map[string]string
		want   bool
	}{
		{"", none, true},
		{"all()", out, true},
		{"peering.rebound.dev/in-set == 'true'", in, true},
		{"peering.rebound.dev/in-set == 'true'", none, false},
		{"peering.rebound.dev/in-set == \"true\"", out, false},
		{"peering.rebound.dev/in-set != 'false'", none, true},
		{"peering.rebound.dev/in-set != 'false'", in, true},
		{"peering.rebound.dev/in-set != 'false'", other, true},
		{"peering.rebound.dev/in-set != 'false'", out, false},
		{"has(peering.rebound.dev/in-set)", none, false},
		{"has( peering.rebound.dev/in-set )", out, true},
		{"!has(peering.rebound.dev/in-set)", none, true},
		{"!has(peering.rebound.dev/in-set) || peering.rebound.dev/in-set == 'true'", none, true},
		{"!has(peering.rebound.dev/in-set) || peering.rebound.dev/in-set == 'true'", out, false},
		{"peering.rebound.dev/in-set in {'true', 'maybe'}", other, true},
		{"peering.rebound.dev/in-set in {'true'}", none, false},
		{"peering.rebound.dev/in-set not in {'false'}", none, true},
		{"peering.rebound.dev/in-set not in {'false', 'maybe'}", other, false},
		{"zone == 'a' && peering.rebound.dev/in-set != 'false'", other, true},
		{"zone == 'b' && peering.rebound.dev/in-set != 'false' || zone == 'a'", other, true},
		{"zone == 'b' && (peering.rebound.dev/in-set != 'false' || zone == 'a')", other, false},
		{"!(zone == 'a')", other, false},
		{"!!(zone == 'a')", other, true},
	} {
		got, err := Selects(tc.sel, tc.labels)
		if err != nil || got != tc.want {
			t.Errorf("Selects(%q, %v) = %v, %v; want %v", tc.sel, tc.labels, got, err, tc.want)
		}
	}
	for _, bad := range []string{"zone", "zone = 'a'", "zone == a", "zone == 'a", "has(zone", "(zone == 'a'", "zone contains 'a'", "zone == 'a' extra", "zone in {'a'"} {
		if _, err := Selects(bad, other); err == nil {
			t.Errorf("Selects(%q) accepted a selector it cannot evaluate", bad)
		}
	}
}

// TestInSetSelectorFailsOpen: the BGPPeer meshes every node that the
// controller has not explicitly left out, so nodes the controller never
// labelled (new nodes, a controller that is down) are in the mesh as in
// Calico's own node-to-node mesh.
func TestInSetSelectorFailsOpen(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{}, true},
		{map[string]string{"kubernetes.io/hostname": "n"}, true},
		{map[string]string{peering.LabelInSet: "true"}, true},
		{map[string]string{peering.LabelInSet: "false"}, false},
	} {
		got, err := Selects(InSetSelector, tc.labels)
		if err != nil || got != tc.want {
			t.Errorf("InSetSelector %q on %v = %v, %v; want %v", InSetSelector, tc.labels, got, err, tc.want)
		}
	}
}
