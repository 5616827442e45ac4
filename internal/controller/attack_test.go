package controller

import (
	"testing"
	"time"

	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
)

// TestAttackStaleTestimonyCountsForReusedRound: FAILS (a real flaw).
//
// Unsafe outcome: the reconciler taints node-3 (and, one pass later, lets
// its stateful pods be force-deleted) on testimonies the members wrote an
// hour before the round's Lease read. Round ids are "<node>-<n>" with n
// counted by an in-memory Fencer from 1; the reconciler drops a node's
// Fencer when it leaves the plan's targets, and a restarted or new leader
// starts with none, so the next incident's first round is "node-3-1"
// again. Members whose agents cannot rewrite their reports (API Priority
// and Fairness throttling the agents but not the kubelets' Lease renewals,
// an expired token, a crash-looping agent) still carry the old answer to
// "node-3-1" with a long silence, and their Leases renew, so they count.
// Meanwhile node-3 may well be talking to them (it was up for the whole
// hour), i.e. sanctioned and feeding its watchdog, with its pods running.
func TestAttackStaleTestimonyCountsForReusedRound(t *testing.T) {
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	for _, variant := range []string{"the node leaves the targets", "the controller restarts"} {
		t.Run(variant, func(t *testing.T) {
			f := newFencingFixture(t, true)
			f.pass(t)
			f.advance(wait)
			f.pass(t)
			d := f.document(t)
			if len(d.Rounds) != 1 {
				t.Fatalf("rounds %+v", d.Rounds)
			}
			first := d.Rounds[0].Round
			// node-0 and node-1 answer the first round; then their agents'
			// writes start failing, so these answers stay in their reports.
			f.testify(t, first, 2*wait, "node-0", "node-1")
			// node-3 comes back before the next pass: no taint.
			f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Alive, LeaseRenewSeen: now}
			f.pass(t)
			if hasOutOfService(f.node(t, "node-3")) {
				t.Fatal("incident 1 tainted")
			}
			switch variant {
			case "the node leaves the targets":
				f.r.opts.Targets.Set(nil)
				f.pass(t)
				f.r.opts.Targets.Set([]rescue.FencingTarget{{Node: "node-3", Pods: 1, Due: true}})
			case "the controller restarts":
				f.r = newFencingReconciler(f.r.cache, f.r.reader, f.r.opts)
			}
			// An hour later node-3 is cut from the API again.
			f.advance(time.Hour)
			f.verdict["node-3"] = liveness.NodeVerdict{Verdict: liveness.Dead, Early: true, DetectedAt: f.clock.Now()}
			f.pass(t)
			f.advance(wait)
			f.pass(t)
			d = f.document(t)
			if len(d.Rounds) != 1 {
				t.Fatalf("rounds %+v", d.Rounds)
			}
			if d.Rounds[0].Round == first {
				t.Errorf("the second incident's round id %q repeats the first's", first)
			}
			f.pass(t)
			if hasOutOfService(f.node(t, "node-3")) {
				t.Errorf("UNSAFE: node-3 tainted on answers written an hour before the round's read")
				f.pass(t)
				if rescue.Fenced(f.node(t, "node-3")) {
					t.Errorf("UNSAFE: and verified: its stateful pods will be force-deleted")
				}
			}
		})
	}
}

// TestAttackFailoverBetweenTaintAndVerify: PASSES (holds).
//
// A new leader that finds rebound's taint it did not put on never verifies
// it (so the pods are not force-deleted by rebound), even when the
// members' testimonies and everything else still look as at the taint.
func TestAttackFailoverBetweenTaintAndVerify(t *testing.T) {
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	f := newFencingFixture(t, true)
	f.pass(t)
	f.advance(wait)
	f.pass(t)
	round := f.document(t).Rounds[0].Round
	f.testify(t, round, 2*wait, "node-0", "node-1", "node-2")
	f.pass(t)
	if !hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("control: not tainted")
	}
	f.r = newFencingReconciler(f.r.cache, f.r.reader, f.r.opts)
	for range 5 {
		f.pass(t)
		f.advance(wait)
	}
	if n := f.node(t, "node-3"); rescue.Fenced(n) {
		t.Errorf("a new leader verified a taint it did not put on: %v", n.Annotations)
	}
}
