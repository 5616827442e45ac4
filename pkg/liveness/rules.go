package liveness

import (
	"fmt"
	"time"
)

// The planners' rule table. Assess writes one verdict per node; what a
// planner may do to the node is read from that verdict through this one
// ordered list, first match wins, as Cluster API keeps its remediation
// rules in one list. Evidence of life comes first: whatever else the
// verdict says, a node that a witness reaching the API sees alive, or
// whose kubelet rebound watches renew its Lease, is not stranded, not a
// target of a replacement's doubt, not pruned from the mesh and not
// marked. A planner never re-derives these from the verdict's fields:
// finding one planner reading another slice of the verdict than the
// others is how a live node left the mesh while the rescue planner held
// it.

// RuleName names the first rule of Rules a verdict matches.
type RuleName string

// Rules, in their order.
const (
	// RuleCutOff: NotReady, or its Lease stale, yet a witness that counts
	// has it alive first-hand since the loss (CutOffFromAPI).
	RuleCutOff RuleName = "CutOffFromAPI"
	// RuleVeto: a fresh Ready observer has a session with it up.
	RuleVeto RuleName = "ObserverVeto"
	// RuleLeaseRenewing: rebound watched its Lease renew within the renew
	// interval plus the margin (never a first sight): its kubelet reaches
	// the API now, whatever its Ready flag says.
	RuleLeaseRenewing RuleName = "LeaseRenewing"
	// RuleDeadEarly: Dead on both planes while the API still has it
	// Ready: it may be marked (pkg/unreachable).
	RuleDeadEarly RuleName = "DeadEarly"
	// RuleDead: Dead (NotReady, and a quorum with no one alive).
	RuleDead RuleName = "Dead"
	// RuleNone: nothing above: upstream's view decides (Ready, or
	// NotReady and Unknown).
	RuleNone RuleName = "None"
)

// Rule is one entry of the table.
type Rule struct {
	Name RuleName
	// Life: a match is evidence of life, and holds every destructive act.
	Life bool
	// Match says whether v matches, and why in words.
	Match func(v NodeVerdict) (why string, ok bool)
}

// Rules is the table, in order.
var Rules = []Rule{
	{Name: RuleCutOff, Life: true, Match: func(v NodeVerdict) (string, bool) {
		return "cut off from the API, not dead: " + v.Reason, v.Verdict == CutOffFromAPI
	}},
	{Name: RuleVeto, Life: true, Match: func(v NodeVerdict) (string, bool) {
		return "a live observer vetoes its death: " + v.Veto, v.Veto != ""
	}},
	{Name: RuleLeaseRenewing, Life: true, Match: func(v NodeVerdict) (string, bool) {
		return fmt.Sprintf("its kubelet reaches the API: rebound watched its Lease renew at %s (stale only from %s)", stamp(v.LeaseRenewSeen), stamp(v.LeaseStaleAt)), v.LeaseFresh()
	}},
	{Name: RuleDeadEarly, Match: func(v NodeVerdict) (string, bool) {
		return v.Reason, v.Verdict == Dead && v.Early
	}},
	{Name: RuleDead, Match: func(v NodeVerdict) (string, bool) {
		return v.Reason, v.Verdict == Dead
	}},
}

// Rule returns the first rule of Rules that v matches and why;
// RuleNone and the verdict's reason when none does.
func (v NodeVerdict) Rule() (Rule, string) {
	for _, r := range Rules {
		if why, ok := r.Match(v); ok {
			return r, why
		}
	}
	return Rule{Name: RuleNone}, v.Reason
}

// EvidenceOfLife says why the node is alive first-hand, and whether it
// is: cut off from the API but seen alive by a witness that counts, a
// live observer's veto, or its Lease seen renewing. Every destructive
// planner holds such a node: peering keeps it in the mesh (and puts it
// back at once), pkg/unreachable does not mark it, pkg/rescue neither
// strands its pods nor doubts it as a target.
func (v NodeVerdict) EvidenceOfLife() (string, bool) {
	r, why := v.Rule()
	return why, r.Life
}

// DeadEarly reports whether the table makes the node Dead on both planes
// while the API has it Ready, with no evidence of life: the one node
// pkg/unreachable may mark.
func (v NodeVerdict) DeadEarly() bool {
	r, _ := v.Rule()
	return r.Name == RuleDeadEarly
}

// RenewInterval is how often a kubelet renews a Lease of the given
// spec.leaseDurationSeconds: a fixed quarter of it
// (NodeLeaseRenewIntervalFraction). Zero for an unset duration.
func RenewInterval(leaseDuration time.Duration) time.Duration {
	if leaseDuration <= 0 {
		return 0
	}
	return leaseDuration / 4
}
