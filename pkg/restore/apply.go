package restore

import (
	"context"
	"time"

	"rebound/pkg/rescue"
	"rebound/pkg/rescue/execute"
)

// reportingController names `rebound restore bringup` in the Events the
// shared executor (pkg/rescue/execute, also the controller's) records, one
// for every action it takes.
const reportingController = "rebound.dev/restore-bringup"

func (b *bringup) executor() *execute.Executor {
	return &execute.Executor{Client: b.opts.Client, Component: reportingController, Now: b.opts.Now}
}

// act applies one action (or, when hold says why not, only records it)
// through the shared executor and keeps the policy's status.lastActions as
// the controller does, so that the planner's rate limit holds across
// rounds.
func (b *bringup) act(ctx context.Context, a rescue.Action, w rescue.Workload, hold string, now time.Time) {
	rep := ActionReport{AtSeconds: b.out.since(), Kind: a.Kind, Namespace: a.Namespace, Name: a.Name, Pod: a.Pod, Node: a.Node, DryRun: hold != "", Reason: a.Reason}
	if hold != "" {
		rep.Outcome = hold
		if _, seen := b.planned[a.Key()]; !seen {
			b.planned[a.Key()] = true
			b.result.Actions = append(b.result.Actions, rep)
		}
		return
	}
	exec := b.executor()
	o := exec.Apply(ctx, a)
	rep.Result, rep.Outcome = o.Result, o.Detail
	b.result.Actions = append(b.result.Actions, rep)
	b.out.line("action", "%s %s/%s: %s", a.Kind, a.Namespace, a.Name, rep.Outcome)
	if err := exec.RecordOutcome(ctx, a, w, o); err != nil {
		b.out.line("event", "Event for %s %s/%s not recorded: %v", a.Kind, a.Namespace, a.Name, err)
	}
	if o.Applied() {
		b.policy.Status.LastActions = rescue.PrependRecords(b.policy.Status.LastActions, a.Record(now, rescue.ResultSucceeded))
	}
}
