package rescue

import (
	"cmp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rebound/api/v1alpha1"
)

// Limits, per policy, so that a mass failure never becomes an action storm:
//
//   - maxConcurrent bounds the rescues in flight. A rescue is in flight
//     while a critical pod on a NotReady node is terminating and its
//     ReplicaSet/Deployment is not fully available yet, or while a pod
//     force-deleted off a fenced node is held by finalizers. The count is
//     read from the cluster, not remembered, so it survives a restart.
//     A stateful pod waiting for fencing is not in flight: nothing was done
//     to it that could complete, and counting it would let stuck
//     StatefulSets block every stateless rescue.
//   - maxActionsPerMinute bounds the actions within any minute, counted
//     from status.lastActions (real actions only, not dry-run ones), the
//     caller's in-memory ledger (Snapshot.RecentActions: what the cache may
//     not show yet) and this plan's. status keeps only the last 10
//     records: when all 10 lie within the minute, older actions of that
//     minute may have been dropped, so the planner assumes the limit is
//     reached until the oldest record leaves the window (without this,
//     each plan could add another maxActionsPerMinute-10 actions, without
//     bound). That assumption is needed only while the ledger may be
//     missing some of the minute: once it has run for a full minute
//     (Snapshot.LedgerSince) its count is exact and a limit above 10 per
//     minute applies as written. After a restart the first minute is
//     therefore capped at 10 per minute, never above the limit.
//
// Candidates are served earliest deadline first (then namespace, name), so
// the pod stranded longest goes first and the order never depends on the
// input's order.

// countsInFlight reports whether a critical pod on a NotReady node is a
// rescue in flight.
func countsInFlight(pod *corev1.Pod, w Workload, o owners) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	switch w.Class {
	case ClassStateless:
		ok, _ := o.available()
		return !ok
	case ClassStateful:
		return forceDeleteIssued(pod)
	default:
		return false
	}
}

// applyLimits admits candidates in priority order until a policy's limits
// are used up; the rest become RateLimited. Each candidate first needs a
// target (placeReplacement), in the same order, so that the pod first in
// line gets the room. Two candidates with the same
// action (two pods of one Deployment asking for its scale bounce) become one
// action, and the second pod follows the first one's outcome.
func (p *planner) applyLimits() {
	slices.SortFunc(p.candidates, func(a, b candidate) int {
		ca, cb := &p.critical[a.pod], &p.critical[b.pod]
		return cmp.Or(
			strings.Compare(a.rule.name, b.rule.name),
			ca.Deadline.Compare(cb.Deadline),
			strings.Compare(ca.Namespace, cb.Namespace),
			strings.Compare(ca.Name, cb.Name),
		)
	})

	type budget struct {
		window   []time.Time // action times within the last minute, oldest first
		inFlight int
		// historyFull: status.lastActions is full of records within the
		// minute; full until the oldest leaves the window.
		historyFull bool
		fullUntil   time.Time
	}
	budgets := make(map[*policyRule]*budget)
	leaders := make(map[string]int) // action key -> candidate that carries it

	for ci := range p.candidates {
		c := &p.candidates[ci]
		cp := &p.critical[c.pod]
		b := budgets[c.rule]
		if b == nil {
			b = &budget{window: c.rule.recentActions(p.now, p.snap.RecentActions), inFlight: c.rule.report.InFlight}
			b.fullUntil, b.historyFull = c.rule.historyFull(p.now, p.snap.LedgerSince)
			budgets[c.rule] = b
		}

		key := c.act.Key()
		if li, dup := leaders[key]; dup {
			leader := &p.critical[p.candidates[li].pod]
			if leader.Decision == DecisionAct {
				p.report(cp, DecisionInFlight, "%s is planned for pod %s: %s", key, leader.Name, c.act.Reason)
			} else {
				p.report(cp, leader.Decision, "%s is planned for pod %s, which is %s: %s", key, leader.Name, leader.Decision, leader.Reason)
			}
			c.rule.report.RateLimited += b2i(cp.Decision == DecisionRateLimited)
			continue
		}
		leaders[key] = ci

		// The gates before the limits (target.go): a Ready node must
		// admit the replacement, and its room is reserved for it. A pod
		// left without an action gives the room back.
		slot, placed := p.placeReplacement(c)
		if !placed {
			continue
		}
		switch {
		case c.rule.suspended:
			p.targets.unreserve(slot)
			p.report(cp, DecisionSuspended, "policy %s is suspended, so no action; it would: %s", c.rule.name, c.act.Reason)
		case c.startsRescue && b.inFlight >= c.rule.maxConcurrent:
			// Only new input (a replacement becoming available) frees a
			// slot, so no NextCheck.
			p.targets.unreserve(slot)
			p.report(cp, DecisionRateLimited, "maxConcurrent %d reached (%d rescues in flight); waiting for one to complete before: %s",
				c.rule.maxConcurrent, b.inFlight, c.act.Reason)
			c.rule.report.RateLimited++
		case len(b.window) >= c.rule.maxPerMinute:
			p.targets.unreserve(slot)
			free := b.window[len(b.window)-c.rule.maxPerMinute].Add(time.Minute)
			p.report(cp, DecisionRateLimited, "maxActionsPerMinute %d reached; next slot at %s, then: %s",
				c.rule.maxPerMinute, formatTime(free), c.act.Reason)
			c.rule.report.RateLimited++
			p.wake(free)
		case b.historyFull:
			p.targets.unreserve(slot)
			p.report(cp, DecisionRateLimited, "status.lastActions holds only its last %d records, all within the last minute, so older actions may count towards maxActionsPerMinute %d; next slot at %s, then: %s",
				LastActionsCapacity, c.rule.maxPerMinute, formatTime(b.fullUntil), c.act.Reason)
			c.rule.report.RateLimited++
			p.wake(b.fullUntil)
		default:
			// Kept sorted: a record from a skewed clock may lie ahead of now.
			b.window = append(b.window, p.now)
			slices.SortFunc(b.window, func(x, y time.Time) int { return x.Compare(y) })
			if c.startsRescue {
				b.inFlight++
			}
			c.act.DryRun = c.rule.dryRun
			cp.Decision, cp.Action = DecisionAct, c.act.Kind
			if c.act.DryRun {
				cp.Reason = "dry run: " + cp.Reason
			}
			c.rule.report.Actions++
			p.actions = append(p.actions, c.act)
		}
	}
	for _, r := range p.rules {
		r.report.ActionsLastMinute = len(r.recentActions(p.now, p.snap.RecentActions))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// recentActions returns the times of the policy's real (not dry-run)
// actions within the minute before now, oldest first: those of
// status.lastActions (so that the rate limit survives a restart) and those
// of the caller's ledger (so that a cache that has not seen the latest
// status yet cannot hide them), each action once.
func (r *policyRule) recentActions(now time.Time, ledger []LedgerEntry) []time.Time {
	type key struct {
		at     int64
		action v1alpha1.RecordedAction
		pod    string
	}
	seen := map[key]bool{}
	var times []time.Time
	add := func(a *v1alpha1.ActionRecord) {
		if a.DryRun || now.Sub(a.Time.Time) >= time.Minute {
			return
		}
		// The API keeps a record's time to the second.
		k := key{a.Time.Unix(), a.Action, a.Pod}
		if seen[k] {
			return
		}
		seen[k] = true
		times = append(times, a.Time.Time)
	}
	for i := range r.policy.Status.LastActions {
		add(&r.policy.Status.LastActions[i])
	}
	for i := range ledger {
		if ledger[i].Policy == r.name {
			add(&ledger[i].Record)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times
}

// historyFull reports whether status.lastActions is at capacity with every
// record within the minute before now, and when its oldest record leaves
// that minute. A ledger that began a minute or more before now holds the
// whole minute: then nothing can be missing and the history is never
// "full".
func (r *policyRule) historyFull(now, ledgerSince time.Time) (until time.Time, full bool) {
	records := r.policy.Status.LastActions
	if len(records) < LastActionsCapacity {
		return time.Time{}, false
	}
	if !ledgerSince.IsZero() && now.Sub(ledgerSince) >= time.Minute {
		return time.Time{}, false
	}
	oldest := records[0].Time.Time
	for _, a := range records[1:] {
		if a.Time.Time.Before(oldest) {
			oldest = a.Time.Time
		}
	}
	if now.Sub(oldest) >= time.Minute {
		return time.Time{}, false
	}
	return oldest.Add(time.Minute), true
}
