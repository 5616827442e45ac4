package peering

import "testing"

// TestBGPPort: the port published for a node comes from one place, in
// this order: its annotation, its own agent's report, the controller's
// default; 179 is published as 0 (BGP's default).
func TestBGPPort(t *testing.T) {
	own := []Report{{Reporter: "a", ListenPort: 1790}, {Reporter: "b", ListenPort: 2790}}
	tests := []struct {
		name    string
		node    Node
		reports []Report
		def     uint16
		want    uint16
	}{
		{"nothing known: 179", Node{Name: "a"}, nil, 0, 0},
		{"the controller's default", Node{Name: "a"}, nil, 1179, 1179},
		{"the agent's report beats the default", Node{Name: "a"}, own, 1179, 1790},
		{"another node's report is not this node's port", Node{Name: "c"}, own, 0, 0},
		{"the annotation beats the report", Node{Name: "a", Port: 3790}, own, 0, 3790},
		{"179 publishes as 0", Node{Name: "a", Port: 179}, nil, 1179, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := bgpPort(tc.node, tc.reports, Config{DefaultBGPPort: tc.def}); got != tc.want {
				t.Errorf("bgpPort = %d, want %d", got, tc.want)
			}
		})
	}
}
