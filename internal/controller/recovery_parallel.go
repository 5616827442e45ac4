package controller

import (
	"context"
	"fmt"
	"sync"

	"rebound/pkg/rescue"
)

// applyParallelism bounds the writes one pass has in flight. A rescue of
// hundreds of pods whose deadlines pass together would otherwise wait for
// one round trip after another: at 20 ms each, the two-hundredth delete
// would come 4 s late. The plan already applied every limit, and no two
// actions of a plan touch the same object, so their order does not matter.
const applyParallelism = 16

// applied is the outcome of one action.
type applied struct {
	result string
	err    error
}

// holdReason says why an action is not taken ("" when it is).
func (r *RecoveryReconciler) holdReason(a rescue.Action, stopped bool) string {
	switch {
	case stopped:
		return fmt.Sprintf("stop switch ConfigMap %s exists", r.opts.StopSwitch)
	case r.opts.DryRun:
		return "controller runs with --dry-run"
	case a.DryRun:
		return "policy " + a.Policy + " has dryRun: true"
	}
	return ""
}

// applyAll applies every action that is not held, at most
// applyParallelism at once, and returns the outcomes by index.
func (r *RecoveryReconciler) applyAll(ctx context.Context, actions []rescue.Action, stopped bool) []applied {
	out := make([]applied, len(actions))
	sem := make(chan struct{}, applyParallelism)
	var wg sync.WaitGroup
	for i, a := range actions {
		if r.holdReason(a, stopped) != "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res, err := r.apply(ctx, a)
			out[i] = applied{result: res, err: err}
		}()
	}
	wg.Wait()
	return out
}
