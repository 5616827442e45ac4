package restore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"rebound/pkg/rescue"
	"rebound/pkg/zone"
)

func (b *bringup) reportPlan(plan rescue.Plan, dry bool) {
	b.result.Zones = b.result.Zones[:0]
	for _, z := range plan.Zones.Zones {
		zr := ZoneReport{Zone: zone.DisplayZone(z.Zone), State: z.State.String(), NotReady: z.NotReady, Total: z.Total, Rate: z.Rate, Reason: z.StateReason}
		b.result.Zones = append(b.result.Zones, zr)
		meaning := ""
		if z.NotReady > 0 && z.Rate == 0 {
			meaning = "; upstream evicts no pod from its NotReady nodes"
		}
		b.out.change("zone/"+z.Zone, zr.State+fmt.Sprint(z.NotReady, z.Total),
			"zone %s: %s (%s)%s", zr.Zone, zr.State, zr.Reason, meaning)
	}
	b.result.Stranded = b.result.Stranded[:0]
	for _, cp := range plan.Critical {
		b.result.Stranded = append(b.result.Stranded, PodReport{
			Namespace: cp.Namespace, Name: cp.Name, Node: cp.Node, Workload: cp.Workload.String(), Decision: cp.Decision, Reason: cp.Reason,
		})
		b.out.change("pod/"+cp.Key(), string(cp.Decision)+string(cp.Action)+fmt.Sprint(cp.Terminating),
			"pod %s (%s) on NotReady node %s: %s", cp.Key(), cp.Workload, cp.Node, decisionWords(cp, dry))
	}
	for _, w := range plan.Warnings {
		if !slices.Contains(b.result.Warnings, w) {
			b.result.Warnings = append(b.result.Warnings, w)
			b.out.line("warning", "warning: %s", w)
		}
	}
}

func decisionWords(cp rescue.CriticalPod, dry bool) string {
	switch {
	case cp.Action != "" && dry:
		return fmt.Sprintf("would %s, not applied (%s)", cp.Action, cp.Reason)
	case cp.Action != "":
		return fmt.Sprintf("%s (%s)", cp.Action, cp.Reason)
	}
	return fmt.Sprintf("%s: %s", cp.Decision, cp.Reason)
}

// finish records the outcome and prints the summary.
func (b *bringup) finish(o Outcome, now time.Time) {
	r := b.result
	r.Outcome, r.ExitCode = o, o.ExitCode()
	r.ElapsedSeconds = now.Sub(b.start).Seconds()
	var avail, notAvail []string
	for _, w := range r.Workloads {
		if w.State == StateAvailable {
			avail = append(avail, w.Ref.Display())
		} else {
			notAvail = append(notAvail, fmt.Sprintf("%s %s: %s", w.Ref.Display(), w.State, w.Message))
		}
	}
	elapsed := now.Sub(b.start).Round(100 * time.Millisecond)
	switch o {
	case OutcomeSucceeded:
		r.Message = fmt.Sprintf("bring-up succeeded in %s: all %d essential workloads available (deadline %s)", elapsed, len(r.Workloads), r.Deadline)
	case OutcomeDryRun:
		r.Message = fmt.Sprintf("dry run: %d of %d essential workloads available now, %d actions planned, nothing changed", len(avail), len(r.Workloads), len(r.Actions))
	case OutcomeRefusedUnsafe:
		r.Message = fmt.Sprintf("bring-up refused as unsafe after %s: %d of %d workloads available; these need fencing first (taint the dead node %s once it is confirmed off, then run again):\n  %s",
			elapsed, len(avail), len(r.Workloads), "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", strings.Join(notAvail, "\n  "))
	case OutcomeStopped:
		applied, held := 0, 0
		for _, a := range r.Actions {
			if a.DryRun {
				held++
			} else if a.Result == rescue.ResultSucceeded {
				applied++
			}
		}
		before := ""
		if applied > 0 {
			before = fmt.Sprintf(", after %d applied before it was pulled", applied)
		}
		sw := b.opts.StopSwitch
		r.Message = fmt.Sprintf("bring-up stopped after %s: the stop switch ConfigMap %s exists, so rebound acts on nothing (%d actions planned, not applied%s); %d of %d workloads available. Delete it (kubectl -n %s delete configmap %s) to let rebound act, then run again",
			elapsed, sw, held, before, len(avail), len(r.Workloads), sw.Namespace, sw.Name)
	case OutcomeTimedOut:
		r.Message = fmt.Sprintf("bring-up timed out after %s (deadline %s): %d of %d workloads available; still missing:\n  %s",
			elapsed, r.Deadline, len(avail), len(r.Workloads), strings.Join(notAvail, "\n  "))
	}
	b.out.line("summary", "%s", r.Message)
}
