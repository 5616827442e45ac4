package controller

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
	"rebound/pkg/rescue"
)

// TestAttackStaleTestimonyCountsForReusedRound (a flaw an attack found, now
// held: round names carry a random part).
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

// TestAttackRoundTimeTakenBeforeTheLeaseRead (a flaw an attack found, now
// held: the rule's t is taken after the read's answer).
//
// Unsafe outcome: the taint lands 14.6 s after a Lease renewal that the
// round's own read saw, while that renewal may keep x's agent sanctioned
// (and x resetting no earlier) until renewal + T = 16 s. Reconcile reads
// the clock once (mono) at the top of the pass, then lists the
// PeeringReports, runs the judge, reads the stop switch, and then, node by
// node, makes the quorum GETs; the Fencer takes that early reading as t,
// the time of "its own read". Any delay before a node's Lease GET (a slow
// or throttled apiserver, a long list of reports, the GETs of the other
// target nodes in a zone outage) is silently subtracted from the wait:
// here the GET is sent 25 s after the reading. The proof needs t at or
// after the read's answer.
func TestAttackRoundTimeTakenBeforeTheLeaseRead(t *testing.T) {
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	tm := fencing.DefaultTiming()
	f := newFencingFixture(t, true)
	var renewedAt time.Time
	f.api.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != "node-3" || !renewedAt.IsZero() {
			return false, nil, nil
		}
		// The pass reached node-3's Lease 25 s after its clock reading;
		// node-3's kubelet renewed just before (and then lost the API).
		f.advance(25 * time.Second)
		renewedAt = f.clock.Now()
		rt := metav1.NewMicroTime(renewedAt)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "node-3", ResourceVersion: "2"},
			Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
		if err := f.api.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), l, corev1.NamespaceNodeLease); err != nil {
			t.Fatal(err)
		}
		return false, nil, nil
	})
	start := f.clock.Now()
	f.pass(t)
	if renewedAt.IsZero() {
		t.Fatal("the reactor did not run")
	}
	// Step the passes along until the reconciler's own clock says the
	// wait is over, and then a second at a time until it opens a round.
	f.advance(start.Add(wait).Sub(f.clock.Now()))
	f.pass(t)
	d := f.document(t)
	for i := 0; len(d.Rounds) == 0 && i < 60; i++ {
		f.advance(time.Second)
		f.pass(t)
		d = f.document(t)
	}
	if len(d.Rounds) != 1 {
		t.Fatalf("no round published at %s after the renewal", f.clock.Now().Sub(renewedAt))
	}
	f.testify(t, d.Rounds[0].Round, 2*wait, "node-0", "node-1", "node-2")
	f.pass(t)
	if !hasOutOfService(f.node(t, "node-3")) {
		t.Fatal("not tainted once the wait after the read ran out: the row would hold by never fencing")
	}
	if hasOutOfService(f.node(t, "node-3")) {
		since := f.clock.Now().Sub(renewedAt)
		if since < tm.Sanction+2*tm.Watchdog {
			t.Errorf("UNSAFE: tainted %s after a renewal its round's read contained; the agent may be sanctioned until renewal + T (%s) and the proof assumes the wait T + 2W + margin (%s) counts from the read",
				since.Round(time.Millisecond), tm.Sanction, wait.Round(time.Millisecond))
		}
	}
}
