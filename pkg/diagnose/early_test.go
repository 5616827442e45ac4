package diagnose

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// Without agents, a minority of renewing Leases and the rest stale is
// both a failure of the workers' path to the API and a mass death:
// diagnose names the case and what tells them apart.
func TestFewRenewingWithoutAgents(t *testing.T) {
	const cause = "look the same from the API"
	cases := []struct {
		name      string
		nodes     int
		renewing  []int // the others' Leases were last renewed a minute ago
		noLeases  bool
		wantFound bool
		words     []string
	}{
		{name: "one of six renews (S16 without agents)", nodes: 6, renewing: []int{0}, wantFound: true,
			words: []string{"the Leases of 5 of 6 nodes are stale (node-1, node-2, node-3, node-4, node-5) while only node-0 renew", "run the agents"}},
		{name: "two of seven renew", nodes: 7, renewing: []int{0, 3}, wantFound: true,
			words: []string{"5 of 7 nodes are stale", "node-0, node-3 renew"}},
		{name: "every Lease renews", nodes: 6, renewing: []int{0, 1, 2, 3, 4, 5}},
		{name: "one stale node is a node's own failure", nodes: 6, renewing: []int{0, 1, 2, 3, 4}},
		{name: "half renew: not a minority", nodes: 6, renewing: []int{0, 1, 2}},
		{name: "none renews: the whole cluster, not this shape", nodes: 6},
		{name: "Leases unreadable: nothing said", nodes: 6, renewing: []int{0}, noLeases: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := at(time.Minute)
			w := newWorld(now)
			w.cluster(tc.nodes)
			if !tc.noLeases {
				w.x.Leases = map[string]liveness.Lease{}
				for i := range tc.nodes {
					seen := now.Add(-time.Minute)
					for _, r := range tc.renewing {
						if r == i {
							seen = now.Add(-2 * time.Second)
						}
					}
					w.x.Leases[fmt.Sprintf("node-%d", i)] = liveness.Lease{RenewSeen: seen, RenewInterval: 10 * time.Second}
				}
			}
			r := w.explain()
			var found *Finding
			for i, f := range r.Findings {
				if f.Object == "Lease plane" && strings.Contains(f.Cause, cause) {
					found = &r.Findings[i]
				}
			}
			if (found != nil) != tc.wantFound {
				t.Fatalf("finding present = %v, want %v; findings: %+v", found != nil, tc.wantFound, r.Findings)
			}
			for _, word := range tc.words {
				if !strings.Contains(found.Cause+" "+found.Rebound, word) {
					t.Errorf("finding %+v lacks %q", *found, word)
				}
			}
		})
	}
}
