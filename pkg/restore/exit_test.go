package restore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDeadline(t *testing.T) {
	d := DefaultDeadline()
	for nodes, want := range map[int]time.Duration{
		0: 3 * time.Minute, 1: 3*time.Minute + 5*time.Second, 5: 3*time.Minute + 25*time.Second,
		50: 7*time.Minute + 10*time.Second, 100: 11*time.Minute + 20*time.Second, -1: 3 * time.Minute,
	} {
		if got := d.For(nodes); got != want {
			t.Errorf("For(%d) = %s, want %s", nodes, got, want)
		}
	}
	if got := (Deadline{Base: time.Hour, PerNode: time.Hour}).For(1000); got != 24*time.Hour {
		t.Errorf("huge deadline = %s, want capped at 24h", got)
	}
	if got := d.explain(5); got != "3m25s (base 3m0s + 5s x 5 nodes)" {
		t.Errorf("explain = %q", got)
	}
	for _, bad := range []Deadline{{Base: 0}, {Base: -time.Second}, {Base: time.Minute, PerNode: -time.Second}, {Base: 48 * time.Hour}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
	if err := (Deadline{Base: time.Minute}).Validate(); err != nil {
		t.Errorf("per-node 0 is valid: %v", err)
	}
}

func TestOutcomeFor(t *testing.T) {
	now := time.Unix(1000, 0)
	before, after := now.Add(time.Second), now.Add(-time.Second)
	cases := []struct {
		states   []State
		deadline time.Time
		want     Outcome
		done     bool
	}{
		{[]State{StateAvailable, StateAvailable}, before, OutcomeSucceeded, true},
		{[]State{StateAvailable, StatePending}, before, "", false},
		{[]State{StateAvailable, StatePending}, after, OutcomeTimedOut, true},
		{[]State{StateAvailable, StatePending}, now, OutcomeTimedOut, true},
		// Nothing more happens without a person: stop before the deadline.
		{[]State{StateAvailable, StateRefusedUnsafe}, before, OutcomeRefusedUnsafe, true},
		// Something may still come: wait, and a timeout wins at the end.
		{[]State{StatePending, StateRefusedUnsafe}, before, "", false},
		{[]State{StatePending, StateRefusedUnsafe}, after, OutcomeTimedOut, true},
		{[]State{StateAvailable}, after, OutcomeSucceeded, true},
	}
	for _, tc := range cases {
		got, done := outcomeFor(tc.states, now, tc.deadline)
		if got != tc.want || done != tc.done {
			t.Errorf("outcomeFor(%v, deadline %+ds) = %q %v, want %q %v", tc.states, int(tc.deadline.Sub(now).Seconds()), got, done, tc.want, tc.done)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for o, want := range map[Outcome]int{OutcomeSucceeded: 0, OutcomeDryRun: 0, OutcomeTimedOut: 3, OutcomeRefusedUnsafe: 4, OutcomeStopped: 4, "": 1} {
		if got := o.ExitCode(); got != want {
			t.Errorf("%q.ExitCode() = %d, want %d", o, got, want)
		}
	}
	bad := BadInputf("unknown workload %s", "x")
	wrapped := fmt.Errorf("context: %w", bad)
	for err, want := range map[error]int{nil: 0, bad: 2, wrapped: 2, errors.New("boom"): 1, &Error{Code: 4, Err: errors.New("unsafe")}: 4} {
		if got := ExitCodeOf(err); got != want {
			t.Errorf("ExitCodeOf(%v) = %d, want %d", err, got, want)
		}
	}
	var ec interface{ ExitCode() int }
	if !errors.As(wrapped, &ec) || ec.ExitCode() != 2 {
		t.Error("a wrapped *Error does not give the CLI its exit code")
	}
	if BadInput(nil) != nil {
		t.Error("BadInput(nil) != nil")
	}
	r := &Result{ExitCode: ExitTimeout, Message: "bring-up timed out"}
	if err := r.Err(); ExitCodeOf(err) != 3 || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("Result.Err() = %v", err)
	}
	if (&Result{ExitCode: 0}).Err() != nil {
		t.Error("success has an error")
	}
}
