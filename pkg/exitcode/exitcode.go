// Package exitcode is the one error type that carries a process exit code
// from rebound's packages to cmd/rebound, which exits with it.
package exitcode

import "errors"

// Error ends the command with Code. Msg, when set, is what the user reads
// (one line: what was wrong and what to do); otherwise Err's message is.
type Error struct {
	Code int
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Msg != "" || e.Err == nil {
		return e.Msg
	}
	return e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the process exit code.
func (e *Error) ExitCode() int { return e.Code }

// Of returns the exit code for err: 0 for nil, the code of an *Error in
// its chain, otherwise fallback.
func Of(err error, fallback int) int {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return fallback
}
