package bird

import (
	"net/netip"
	"strings"
	"testing"
)

func TestProtocolName(t *testing.T) {
	if got := protocolName(netip.MustParseAddr("10.0.0.2")); got != "Mesh_10_0_0_2" {
		t.Errorf("protocolName = %s, want Mesh_10_0_0_2 (Calico's name)", got)
	}
}

// TestPassiveMatchesCalico pins the text comparison of Calico's template:
// each pair has exactly one passive side, and it is the side Calico picks.
func TestPassiveMatchesCalico(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	tests := []struct {
		peer, local string
		want        bool
	}{
		{"10.0.0.3", "10.0.0.2", true},
		{"10.0.0.2", "10.0.0.3", false},
		{"10.0.0.10", "10.0.0.9", false}, // "10.0.0.10" < "10.0.0.9" as text
		{"10.0.0.9", "10.0.0.10", true},
		{"10.0.0.90", "10.0.0.9", true},
	}
	for _, tc := range tests {
		if got := passive(a(tc.peer), a(tc.local)); got != tc.want {
			t.Errorf("passive(peer %s, local %s) = %v, want %v", tc.peer, tc.local, got, tc.want)
		}
		if passive(a(tc.peer), a(tc.local)) == passive(a(tc.local), a(tc.peer)) {
			t.Errorf("%s and %s: both sides passive or both active", tc.peer, tc.local)
		}
	}
}

func TestCheckText(t *testing.T) {
	for _, ok := range []string{"node-a", "ip-10-0-0-1.eu-west-1.compute.internal", "Node_1"} {
		if err := checkText("f", ok); err != nil {
			t.Errorf("checkText(%q): %v", ok, err)
		}
	}
	for bad, what := range map[string]string{
		"a\nb": "line break", "a\rb": "line break", "a{": "brace", "}": "brace",
		`a"b`: "quote", "a'b": "quote", "a;b": "semicolon", `a\b`: "backslash",
		"a\tb": "control character", "ä": "non-ASCII", "": "empty",
		strings.Repeat("a", 254): "at most 253",
	} {
		err := checkText("peers[3].name", bad)
		if err == nil || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "peers[3].name") {
			t.Errorf("checkText(%q) = %v, want an error naming the field and %q", bad, err, what)
		}
	}
}
