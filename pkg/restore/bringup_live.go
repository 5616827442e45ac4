package restore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"rebound/pkg/rescue"
)

// The planner takes a Ready node for a possible target. After a restore
// that is not enough: every Node says what it said when the backup was
// taken, so a dead node stays Ready until kube-controller-manager's
// --node-monitor-grace-period runs out after the restart, and a pod
// deleted to be replaced there would only go Pending on a dead node. So
// the bring-up plans twice. The plan of the whole cluster decides what is
// stranded and what upstream does (zones count every node, as
// kube-controller-manager counts them); the plan of the cluster without
// the Ready nodes not seen alive yet says which of those actions still
// have a target among the live nodes. An action that needs a target
// (Delete, ForceDelete, ScaleDown) is applied only when both plans propose
// it; until then its pod reads NoTarget with the nodes it waits on.

// Lease observation bounds: a kubelet renews its Lease every quarter of
// its duration, so half of it covers two renewals.
const (
	minObservation     = 2 * time.Second
	maxObservation     = 60 * time.Second
	defaultObservation = 20 * time.Second
)

// observationBound is how long the Ready nodes' Leases may take to renew:
// half the longest Lease duration among them, within the bounds.
func observationBound(s *clusterState) time.Duration {
	var longest time.Duration
	for _, n := range s.nodes {
		longest = max(longest, s.leaseDuration[n.Name])
	}
	if longest == 0 {
		return defaultObservation
	}
	return min(max(longest/2, minObservation), maxObservation)
}

// observed reports whether the Lease observation is over: every Ready node
// seen alive, or the bound passed.
func (b *bringup) observed(s *clusterState, nodes map[string]NodeHealth, now time.Time) bool {
	if now.Sub(b.start) >= b.observeFor {
		return true
	}
	for _, n := range s.nodes {
		if h := nodes[n.Name]; h.Ready && !h.Heartbeat {
			return false
		}
	}
	return true
}

// needsTarget: the actions that start or continue a rescue, which the
// planner proposes only when a Ready node admits the replacement.
func needsTarget(k rescue.ActionKind) bool {
	return k == rescue.ActionDelete || k == rescue.ActionForceDelete || k == rescue.ActionScaleDown
}

// liveTargetsOnly returns plan (of the whole cluster) with every action
// that needs a target dropped unless the plan of the live nodes proposes
// it too; the dropped actions' pods say why.
func (b *bringup) liveTargetsOnly(plan rescue.Plan, s *clusterState, nodes map[string]NodeHealth, now time.Time) rescue.Plan {
	notSeen := map[string]bool{}
	var names []string
	for _, n := range s.nodes {
		if h := nodes[n.Name]; h.Ready && !h.Heartbeat {
			notSeen[n.Name] = true
			names = append(names, n.Name)
		}
	}
	if len(notSeen) == 0 {
		// Every Ready node is alive: the two plans are the same.
		b.liveZones, b.liveDisruption = plan.Zones, plan.Disruption
		return plan
	}
	snap := b.snapshot(s, now, notSeen)
	snap.PreviousZones, snap.PreviousDisruption = b.liveZones, b.liveDisruption
	live := rescue.PlanFor(snap)
	b.liveZones, b.liveDisruption = live.Zones, live.Disruption

	proposed := map[string]bool{}
	for _, a := range live.Actions {
		proposed[a.Key()] = true
	}
	liveWhy := map[string]string{}
	for i := range live.Critical {
		cp := &live.Critical[i]
		if cp.Decision == rescue.DecisionNoTarget || cp.Decision == rescue.DecisionHeld {
			liveWhy[cp.Key()] = cp.Reason
		}
	}
	waiting := map[string]bool{} // pods whose action waits, "namespace/pod"
	kept := plan.Actions[:0:0]
	for _, a := range plan.Actions {
		if needsTarget(a.Kind) && !proposed[a.Key()] {
			waiting[a.Namespace+"/"+a.Pod] = true
			continue
		}
		kept = append(kept, a)
	}
	plan.Actions = kept
	if len(waiting) == 0 {
		return plan
	}
	slices.Sort(names)
	alive := 0
	for _, h := range nodes {
		if h.Live() {
			alive++
		}
	}
	critical := slices.Clone(plan.Critical)
	for i := range critical {
		cp := &critical[i]
		if !waiting[cp.Key()] {
			continue
		}
		var reason string
		if alive == 0 {
			reason = fmt.Sprintf("no Ready node has been seen alive yet: the Lease of %s has not been seen renewing, and after a restore a Ready status may date from the backup; rebound waits until a live node can take the replacement",
				shortList(names))
		} else {
			reason = fmt.Sprintf("its replacement could run only on nodes Ready in the API whose Lease has not been seen renewing (%s): after a restore a Ready status may date from the backup, so rebound waits until a live node can take it",
				shortList(names))
			if why := liveWhy[cp.Key()]; why != "" {
				reason += "; among the live nodes: " + why
			}
		}
		cp.Decision, cp.Action, cp.Reason = rescue.DecisionNoTarget, "", reason
	}
	plan.Critical = critical
	return plan
}

// noteStopSwitch prints when the stop switch is pulled or released.
func (b *bringup) noteStopSwitch(pulled, dry bool) {
	b.result.StopSwitchPulled = pulled
	if b.opts.StopSwitch.Name == "" {
		return
	}
	var what string
	switch {
	case pulled && dry:
		what = "pulled: a run without --dry-run would act on nothing and exit 4"
	case pulled && b.opts.WaitOnly:
		what = "pulled (this run never acts anyway)"
	case pulled:
		what = "pulled: acting on nothing; delete it to let rebound act, then run again"
	}
	if pulled {
		b.out.change("stopswitch", what, "stop switch ConfigMap %s: %s", b.opts.StopSwitch, what)
	}
}

// shortList names up to three items and counts the rest.
func shortList(items []string) string {
	const shown = 3
	if len(items) <= shown {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(items[:shown], ", "), len(items)-shown)
}
