package restore

import (
	"fmt"
	"time"

	"rebound/pkg/exitcode"
)

// Exit codes of `rebound restore` and `rebound backup`.
const (
	// ExitOK: every essential workload is available (or the dry run, the
	// backup, the etcd restore succeeded).
	ExitOK = exitcode.OK
	// ExitFailed: anything else went wrong (API unreachable, I/O error).
	ExitFailed = exitcode.Failed
	// ExitBadInput: bad flags or files, an unknown workload, a snapshot that
	// is corrupt, truncated or not a snapshot, a non-empty target. Nothing
	// was changed.
	ExitBadInput = exitcode.BadInput
	// ExitTimeout: the deadline passed with some workload still not
	// available.
	ExitTimeout = 3
	// ExitUnsafe: refused as unsafe. Every workload not available is one
	// rebound refuses to move without fencing (a StatefulSet pod or a pod
	// with a ReadWriteOnce volume on a node nobody confirmed off), or the
	// stop switch is pulled, or the policy is suspended (without
	// --ignore-suspend). Nothing was changed that the refusal covers.
	ExitUnsafe = 4
)

// Error carries the exit code the CLI ends with.
type Error = exitcode.Error

// BadInput wraps err as ExitBadInput.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: ExitBadInput, Err: err}
}

// BadInputf formats an ExitBadInput error.
func BadInputf(format string, args ...any) error {
	return &Error{Code: ExitBadInput, Err: fmt.Errorf(format, args...)}
}

// ExitCodeOf returns the exit code for err: 0 for nil, the code of an
// *Error, ExitFailed otherwise.
func ExitCodeOf(err error) int { return exitcode.Of(err, ExitFailed) }

// Outcome is how a bring-up ended.
type Outcome string

// The outcomes.
const (
	OutcomeSucceeded     Outcome = "Succeeded"
	OutcomeTimedOut      Outcome = "TimedOut"
	OutcomeRefusedUnsafe Outcome = "RefusedUnsafe"
	OutcomeDryRun        Outcome = "DryRun"
	// OutcomeStopped: the stop switch was pulled; the plan was reported
	// and nothing (more) was done.
	OutcomeStopped Outcome = "Stopped"
)

// ExitCode maps an outcome to its exit code.
func (o Outcome) ExitCode() int {
	switch o {
	case OutcomeSucceeded, OutcomeDryRun:
		return ExitOK
	case OutcomeTimedOut:
		return ExitTimeout
	case OutcomeRefusedUnsafe, OutcomeStopped:
		return ExitUnsafe
	default:
		return ExitFailed
	}
}

// outcomeFor decides how a bring-up stands: done is true when it is over.
// Every workload Available: success. Every one not Available refused as
// unsafe: nothing more will happen without a person, so stop now. Past the
// deadline with any still pending: timeout.
func outcomeFor(states []State, now, deadline time.Time) (Outcome, bool) {
	pending, refused := 0, 0
	for _, s := range states {
		switch s {
		case StatePending:
			pending++
		case StateRefusedUnsafe:
			refused++
		}
	}
	switch {
	case pending == 0 && refused == 0:
		return OutcomeSucceeded, true
	case pending == 0:
		return OutcomeRefusedUnsafe, true
	case !now.Before(deadline):
		return OutcomeTimedOut, true
	default:
		return "", false
	}
}
