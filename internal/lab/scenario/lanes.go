package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"rebound/internal/lab/sandbox"
	"rebound/pkg/restore"
)

// The two lanes of a scenario with an upstream baseline.
const (
	LaneWithout = "without rebound"
	LaneWith    = "with rebound"
)

// Pair is one scenario's two sandboxes, played at the same time: Without
// runs only upstream's control loops, With also runs rebound. The caller
// starts rebound on With (a process in the e2e tests, in-process in the
// demo) before it calls a Run*Pair; everything else is the runner's.
type Pair struct {
	Without, With *sandbox.Cluster
	// WithoutTimeline and WithTimeline record each lane.
	WithoutTimeline, WithTimeline *Timeline
}

// both runs f on the two lanes at once and joins their errors, each
// naming its lane.
func (p Pair) both(f func(c *sandbox.Cluster, tl *Timeline, rebound bool) error) error {
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, lane := range []struct {
		c    *sandbox.Cluster
		tl   *Timeline
		name string
	}{{p.Without, p.WithoutTimeline, LaneWithout}, {p.With, p.WithTimeline, LaneWith}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(lane.c, lane.tl, i == 1); err != nil {
				errs[i] = fmt.Errorf("%s: %w (logs in %s/logs)", lane.name, err, lane.c.Dir)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runPair runs one lane function on both lanes at once and returns the
// two results, without rebound first.
func runPair[R any](p Pair, lane func(c *sandbox.Cluster, tl *Timeline, rebound bool) (R, error)) (without, with R, err error) {
	err = p.both(func(c *sandbox.Cluster, tl *Timeline, rebound bool) error {
		r, err := lane(c, tl, rebound)
		if rebound {
			with = r
		} else {
			without = r
		}
		return err
	})
	return without, with, err
}

// S1PairOptions tune S1 on both lanes.
type S1PairOptions struct {
	Workload Workload
	Survivor string
	// Observe is how long the lane without rebound watches the stranded
	// pod; ObserveWith bounds the lane with rebound (it ends at recovery).
	Observe, ObserveWith time.Duration
}

// S1Pair is S1 without and with rebound.
type S1Pair struct {
	Without, With S1Result
	Comparison    Comparison
}

// RunS1Pair plays S1 on both lanes at once.
func RunS1Pair(ctx context.Context, p Pair, opts S1PairOptions) (S1Pair, error) {
	var out S1Pair
	var err error
	out.Without, out.With, err = runPair(p, func(c *sandbox.Cluster, tl *Timeline, rebound bool) (S1Result, error) {
		o := S1Options{Workload: opts.Workload, Survivor: opts.Survivor, Observe: opts.Observe}
		if rebound {
			o.Observe = opts.ObserveWith
		}
		return RunS1(ctx, c, tl, o)
	})
	out.Comparison = Comparison{ID: "s1", Without: out.Without.Recovery, With: out.With.Recovery, Observe: opts.Observe}
	return out, err
}

// S3PairOptions tune S3 on both lanes.
type S3PairOptions struct {
	Workload Workload
	// Timeout bounds each lane's wait for the replacement.
	Timeout time.Duration
}

// S3Pair is S3 without and with rebound.
type S3Pair struct {
	Without, With S3Result
	Comparison    Comparison
}

// RunS3Pair plays S3 on both lanes at once. The lane without rebound waits
// for upstream's NoExecute taint (what moves its pod); the lane with
// rebound does not, since rebound may act first.
func RunS3Pair(ctx context.Context, p Pair, opts S3PairOptions) (S3Pair, error) {
	var out S3Pair
	var err error
	out.Without, out.With, err = runPair(p, func(c *sandbox.Cluster, tl *Timeline, rebound bool) (S3Result, error) {
		return RunS3(ctx, c, tl, S3Options{Workload: opts.Workload, Timeout: opts.Timeout, SkipTaintWait: rebound})
	})
	out.Comparison = Comparison{ID: "s3", Without: out.Without.Recovery, With: out.With.Recovery}
	return out, err
}

// S2PairOptions tune S2 on both lanes.
type S2PairOptions struct {
	Survivor string
	Binaries sandbox.Binaries
	// Deadline bounds both the wait without rebound and the bring-up;
	// zero means S2Deadline.
	Deadline restore.Deadline
	// Progress, if set, gives each lane's restore and bring-up lines a
	// writer.
	Progress func(rebound bool) io.Writer
	// AfterBackup is S2Options.AfterBackup, for the lane without rebound
	// only.
	AfterBackup func(ctx context.Context, c *sandbox.Cluster, backup string) error
}

// S2Pair is S2 without and with rebound.
type S2Pair struct {
	Without, With S2Result
	Comparison    Comparison
}

// RunS2Pair plays S2 on both lanes at once: each backs up its own
// sandbox to <dir>/platform-backup.db and restores it with only the
// survivor alive; the lane without rebound then waits on the Deployments'
// status, the lane with rebound runs the bring-up.
func RunS2Pair(ctx context.Context, p Pair, opts S2PairOptions) (S2Pair, error) {
	var out S2Pair
	var err error
	var restoring sync.Mutex
	out.Without, out.With, err = runPair(p, func(c *sandbox.Cluster, tl *Timeline, rebound bool) (S2Result, error) {
		o := S2Options{Survivor: opts.Survivor, Backup: filepath.Join(c.Dir, "platform-backup.db"), Binaries: opts.Binaries,
			Deadline: opts.Deadline, Bringup: rebound, RestoreLock: &restoring}
		if opts.Progress != nil {
			o.Progress = opts.Progress(rebound)
		}
		if !rebound {
			o.AfterBackup = opts.AfterBackup
		}
		return RunS2(ctx, c, tl, o)
	})
	out.Comparison = Comparison{ID: "s2", Without: out.Without.Recovery, With: out.With.Recovery}
	if b := out.Without.Bringup; b != nil {
		out.Comparison.Observe = time.Duration(b.DeadlineSeconds * float64(time.Second))
	}
	return out, err
}
