// Package exitcode is how every rebound binary (rebound, rebound-manager,
// kubectl-rebound, rebound-bench, rebound-release) turns the error a
// command returns into its process exit code: the one error type that
// carries a code from rebound's packages to cmd/, and the one function
// that prints the error and picks the code.
//
// The codes every binary shares are OK, Failed and BadInput; a command
// documents its own codes above those in its --help (diagnose: 1 something
// blocks recovery; restore: 3 timeout, 4 refused as unsafe).
package exitcode

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// The codes every binary shares.
const (
	// OK: the command did what it was asked.
	OK = 0
	// Failed: anything else went wrong (the API server unreachable, an
	// I/O error, a build that failed).
	Failed = 1
	// BadInput: a flag, an argument or a file is wrong; nothing was done.
	BadInput = 2
)

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

// Usage marks err as bad input (a flag or an argument): what the binaries
// set as cobra's flag error function, so that a mistyped flag exits
// BadInput, not Failed.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: BadInput, Err: err}
}

// Of returns the exit code for err: 0 for nil, the code of an *Error in
// its chain, otherwise fallback.
func Of(err error, fallback int) int {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return fallback
}

// Report is what a binary's main does with the error its command
// returned: nothing for nil; otherwise it writes the error to w once,
// after prefix, as the one line the user reads (never a library's stack
// trace or usage text: the commands silence cobra's own printing), and
// returns the exit code, Of(err, fallback). main exits with it.
func Report(w io.Writer, prefix string, err error, fallback int) int {
	if err == nil {
		return OK
	}
	fmt.Fprintln(w, prefix+strings.TrimRight(err.Error(), "\n"))
	return Of(err, fallback)
}
