package peering

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"rebound/pkg/liveness"
)

// trackIncident returns the incident the plan at now belongs to: nil while
// every node is Ready, the state's incident while one is under way, or a
// new one. A new incident's members are the set it starts from: every
// node the state has in the set, and every node with an address the state
// does not know, because a planner without state (installed during the
// incident, or its ConfigMap lost) must budget against the full mesh, not
// against nobody.
func trackIncident(nodes []Node, st State, now time.Time) *Incident {
	anyNotReady := false
	for _, n := range nodes {
		if !n.Ready {
			anyNotReady = true
			break
		}
	}
	if !anyNotReady {
		return nil
	}
	if st.Incident != nil {
		inc := *st.Incident
		inc.Members = slices.Clone(inc.Members)
		inc.Leaves = slices.Clone(inc.Leaves)
		return &inc
	}
	inc := &Incident{Since: now}
	for _, n := range nodes {
		if wasMember(n, st) {
			inc.Members = append(inc.Members, n.Name)
		}
	}
	slices.Sort(inc.Members)
	return inc
}

// leaveBudget is how many NotReady leaves an incident allows in all.
func leaveBudget(cfg Config, inc *Incident) int {
	return int(cfg.MaxLeaveShare * float64(len(inc.Members)))
}

// spendLeaveBudget holds back, in place, the leaves the incident's budget
// does not cover, and records the ones it does. The budget bounds how many
// of the incident's members are out of the set for being NotReady at once,
// whatever the steps: a member that returns gives its share back, so a
// partition healing node by node lets the last dead nodes go. Quorum-
// confirmed deaths go first, then the longest NotReady, then by name, so
// that the budget goes where the evidence is strongest.
func spendLeaveBudget(cfg Config, nodes []Node, st State, lv liveness.Assessment, inc *Incident, decisions []decision) {
	if inc == nil {
		return
	}
	member := make(map[string]bool, len(inc.Members))
	for _, m := range inc.Members {
		member[m] = true
	}
	var leaving []int
	out := 0
	for i, n := range nodes {
		switch {
		case decisions[i].reason != OutNotReady:
		case wasMember(n, st):
			// Leaving now, a member the state does not know too.
			leaving = append(leaving, i)
		case member[n.Name]:
			out++ // out already, and staying out while NotReady
		}
	}
	slices.SortFunc(leaving, func(a, b int) int {
		va, vb := lv.Of(nodes[a].Name), lv.Of(nodes[b].Name)
		da, db := va.Verdict == liveness.Dead, vb.Verdict == liveness.Dead
		if da != db {
			if da {
				return -1
			}
			return 1
		}
		return cmp.Or(va.Since.Compare(vb.Since), cmp.Compare(nodes[a].Name, nodes[b].Name))
	})
	budget := leaveBudget(cfg, inc)
	for _, i := range leaving {
		if out < budget || !member[nodes[i].Name] {
			// A node that joined during the incident was never counted
			// in its members, so its leave does not shrink them.
			if member[nodes[i].Name] {
				out++
			}
			inc.Leaves = append(inc.Leaves, nodes[i].Name)
			continue
		}
		d := decisions[i]
		decisions[i] = decision{inSet: true, reason: InBudget, message: fmt.Sprintf(
			"would leave (%s), but %d of the %d members this incident began with (since %s) are out already, the most the %g share allows: it stays in the mesh until one of them returns, every node is Ready again, or an operator deletes the dead ones",
			d.message, out, len(inc.Members), stamp(inc.Since), cfg.MaxLeaveShare)}
	}
}

// floorOf is the smallest set the controller stands behind (PeerSet.Floor):
// the members an incident began with, less its whole leave budget and the
// members gone for reasons outside it (deleted, no address, a duplicate
// address). It is measured against the set before the incident, never
// against the set its own leaves made, so the agents' floor check still
// means something after small steps. Without an incident it is the
// current set less one step's share.
func floorOf(cfg Config, nodes []Node, st State, inc *Incident, dups map[string]string) int {
	if inc == nil {
		in := 0
		for _, n := range nodes {
			if n.Address.IsValid() && dups[n.Name] == "" {
				in++
			}
		}
		return in - int(cfg.MaxLeaveShare*float64(in))
	}
	present := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		present[n.Name] = n.Address.IsValid() && dups[n.Name] == ""
	}
	gone := 0
	for _, m := range inc.Members {
		if !present[m] {
			gone++
		}
	}
	return max(0, len(inc.Members)-leaveBudget(cfg, inc)-gone)
}
