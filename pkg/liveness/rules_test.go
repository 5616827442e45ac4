package liveness

import (
	"strings"
	"testing"
	"time"
)

// TestRules: the planners' one table, first match wins, evidence of life
// first.
func TestRules(t *testing.T) {
	renewing := func(v NodeVerdict) NodeVerdict {
		v.LeaseRenewSeen, v.LeaseStaleAt = ago(time.Second), ago(time.Second).Add(12*time.Second)
		return v
	}
	for _, tc := range []struct {
		name  string
		v     NodeVerdict
		rule  RuleName
		life  bool
		words string
	}{
		{name: "CutOffFromAPI", v: NodeVerdict{Verdict: CutOffFromAPI, Reason: "n1 has it Alive"}, rule: RuleCutOff, life: true, words: "n1 has it Alive"},
		{name: "a veto on an Unknown node", v: NodeVerdict{Verdict: Unknown, Veto: "n1 reports its session Established"}, rule: RuleVeto, life: true, words: "Established"},
		{name: "NotReady, its Lease renewing: life", v: renewing(NodeVerdict{Verdict: Unknown}), rule: RuleLeaseRenewing, life: true, words: "kubelet reaches the API"},
		{name: "Dead by a BGP quorum while its Lease renews: life comes first", v: renewing(NodeVerdict{Verdict: Dead}), rule: RuleLeaseRenewing, life: true},
		{name: "a first sight of its Lease is no life", v: func() NodeVerdict { v := renewing(NodeVerdict{Verdict: Unknown}); v.LeaseFirstSight = true; return v }(), rule: RuleNone},
		{name: "a stale Lease is no life", v: func() NodeVerdict { v := renewing(NodeVerdict{Verdict: Unknown}); v.LeaseStale = true; return v }(), rule: RuleNone},
		{name: "Dead early, no reason given: still DeadEarly", v: NodeVerdict{Verdict: Dead, Early: true}, rule: RuleDeadEarly},
		{name: "Dead", v: NodeVerdict{Verdict: Dead, Reason: "quorum"}, rule: RuleDead, words: "quorum"},
		{name: "Alive (Ready, no Lease plane)", v: NodeVerdict{Verdict: Alive}, rule: RuleNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, why := tc.v.Rule()
			if r.Name != tc.rule || r.Life != tc.life {
				t.Fatalf("rule %s (life %v), want %s (life %v)", r.Name, r.Life, tc.rule, tc.life)
			}
			if w, life := tc.v.EvidenceOfLife(); life != tc.life || (life && w != why) {
				t.Errorf("EvidenceOfLife %q %v", w, life)
			}
			if tc.v.DeadEarly() != (tc.rule == RuleDeadEarly) {
				t.Errorf("DeadEarly %v", tc.v.DeadEarly())
			}
			if !strings.Contains(why, tc.words) {
				t.Errorf("why %q does not say %q", why, tc.words)
			}
		})
	}
}
