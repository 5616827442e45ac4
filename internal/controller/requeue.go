package controller

import (
	"errors"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// retryAfterError bounds how long a pass that hit an error waits before the
// next one.
const retryAfterError = 10 * time.Second

// afterError is both reconcilers' one error policy. An error is logged
// here and never handed to controller-runtime: its exponential backoff
// (up to 1000 s) would replace the plan's next check, and a rescue, a
// prune or a re-add would miss its time. The pass comes back at the
// earlier of the plan's next check (res) and retryAfterError. An error
// marked reconcile.TerminalError is configuration that cannot work until
// someone changes it (the Calico API not served, say): retrying it sooner
// helps nobody, so it keeps the plan's next check alone. A pass's errors
// are joined, one per publisher: the pass is terminal only when every one
// of them is, so a failed label patch beside an unserved Calico API is
// still retried soon.
func afterError(log logr.Logger, res ctrl.Result, err error) (ctrl.Result, error) {
	if err == nil {
		return res, nil
	}
	if allTerminal(err) {
		log.Error(err, "configuration error: the rest of the pass was applied; fix it and the next pass picks it up", "nextCheck", res.RequeueAfter)
		return res, nil
	}
	if res.RequeueAfter == 0 || res.RequeueAfter > retryAfterError {
		res.RequeueAfter = retryAfterError
	}
	log.Error(err, "pass failed; retrying", "after", res.RequeueAfter)
	return res, nil
}

// allTerminal reports whether err and, for a joined error, every error it
// joins is marked reconcile.TerminalError.
func allTerminal(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs := joined.Unwrap()
		for _, e := range errs {
			if !allTerminal(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	if errors.Is(err, reconcile.TerminalError(nil)) {
		return true
	}
	if inner := errors.Unwrap(err); inner != nil {
		return allTerminal(inner)
	}
	return false
}

// nextPass is both reconcilers' requeue: the earlier of the plan's next
// check and the moment the liveness verdicts may change with no new
// event; soon after an action, to see its effect; within retryAfterError
// after an error.
func nextPass(now, nextCheck, verdictsChange time.Time, acted, failed bool) ctrl.Result {
	next := nextCheck
	if !verdictsChange.IsZero() && (next.IsZero() || verdictsChange.Before(next)) {
		next = verdictsChange
	}
	res := ctrl.Result{}
	if !next.IsZero() {
		res.RequeueAfter = max(next.Sub(now), 100*time.Millisecond)
	}
	soon := time.Duration(0)
	switch {
	case failed:
		soon = retryAfterError
	case acted:
		soon = 2 * time.Second
	}
	if soon > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > soon) {
		res.RequeueAfter = soon
	}
	return res
}
