package restore

import (
	"context"
	"fmt"
	"time"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
)

// act applies one action (or, dry, only records it) and keeps the
// policy's status.lastActions as the controller would, so that the
// planner's rate limit and its "one scale bounce per pod" rule hold across
// rounds.
func (b *bringup) act(ctx context.Context, s *clusterState, a rescue.Action, dry bool, now time.Time) {
	rep := ActionReport{AtSeconds: b.out.since(), Kind: a.Kind, Namespace: a.Namespace, Name: a.Name, Pod: a.Pod, Node: a.Node, DryRun: dry, Reason: a.Reason}
	if dry {
		rep.Outcome = "not applied (dry run)"
		if b.opts.WaitOnly && !b.opts.DryRun {
			rep.Outcome = "not applied (wait only)"
		}
		if _, seen := b.planned[a.Key()]; !seen {
			b.planned[a.Key()] = true
			b.result.Actions = append(b.result.Actions, rep)
		}
		return
	}
	res := Apply(ctx, b.opts.Client, a)
	rep.Outcome = res.Outcome
	if res.Err != nil {
		rep.Outcome = res.Err.Error()
	}
	b.result.Actions = append(b.result.Actions, rep)
	b.out.line("action", "%s %s/%s: %s", a.Kind, a.Namespace, a.Name, rep.Outcome)
	if res.Applied || res.Err != nil {
		note := a.Reason
		if res.Err != nil {
			note = fmt.Sprintf("%s failed: %v; %s", a.Kind, res.Err, a.Reason)
		}
		if err := recordEvent(ctx, b.opts.Client, now, a, regardingFor(a, s), res.Err != nil, note); err != nil {
			b.out.line("event", "Event for %s %s/%s not recorded: %v", a.Kind, a.Namespace, a.Name, err)
		}
	}
	if !res.Applied {
		return
	}
	// As the controller records it (rescue.Action.Record), newest first.
	last := append([]v1alpha1.ActionRecord{a.Record(now, "Succeeded")}, b.policy.Status.LastActions...)
	b.policy.Status.LastActions = last[:min(len(last), 10)]
}
