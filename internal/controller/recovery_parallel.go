package controller

import (
	"context"
	"sync"

	"github.com/go-logr/logr"

	"rebound/api/v1alpha1"
	"rebound/pkg/rescue"
	"rebound/pkg/rescue/execute"
)

// applyParallelism bounds the actions one pass has in flight. A rescue of
// hundreds of pods whose deadlines pass together would otherwise wait for
// one round trip after another: at 20 ms each, the two-hundredth delete
// would come 4 s late (rebound-bench scale). The plan already applied
// every limit, and no two actions of a plan touch the same object, so
// their order does not matter.
const applyParallelism = 16

// actAll applies every action, at most applyParallelism at once, then
// records each. The policies' records are merged in plan order, so the
// status reads as if they had run one after another. It returns the
// errors in plan order, whether any action succeeded, and the writes of
// the actions' Events, for the caller to make beside the status writes.
func (r *RecoveryReconciler) actAll(ctx context.Context, log logr.Logger, actions []rescue.Action, owners map[string]rescue.Workload, records map[string][]v1alpha1.ActionRecord) ([]error, bool, []func()) {
	// Every action first: a delete does not wait behind the Event of an
	// earlier one for a free slot. One executor for the pass: a node's
	// re-reads are shared by the pass's deletes off it.
	exec := r.exec.Pass()
	applied := make([]execute.Outcome, len(actions))
	inParallel(len(actions), func(i int) {
		applied[i] = exec.Apply(ctx, actions[i])
	})
	var errs []error
	events := make([]func(), 0, len(actions))
	acted := false
	for i, a := range actions {
		recs := map[string][]v1alpha1.ActionRecord{}
		event, err := r.record(ctx, log, a, applied[i], owners, recs)
		events = append(events, event)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		acted = true
		for policy, rs := range recs {
			records[policy] = append(records[policy], rs...)
		}
	}
	return errs, acted, events
}

// statusParallelism bounds the policies' status writes in flight: one
// object each, and a pass waits for the last of them.
const statusParallelism = 64

// inParallel runs f(0) ... f(n-1), at most applyParallelism at once, and
// returns when all have returned.
func inParallel(n int, f func(i int)) { inParallelUpTo(n, applyParallelism, f) }

// inParallelUpTo is inParallel with at most limit at once.
func inParallelUpTo(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}
