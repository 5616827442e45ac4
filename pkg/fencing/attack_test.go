package fencing_test

import (
	"testing"
	"time"

	"rebound/pkg/fencing"
)

// stepAll applies a step's bookkeeping as the reconciler does.
func stepAll(f *fencing.Fencer, in fencing.Input) fencing.Step {
	st := f.Step(in)
	switch st.Action {
	case fencing.PublishRound:
		f.Published(st.Round)
	case fencing.Taint:
		f.Tainted(st.Round)
	case fencing.DeletePods:
		f.Deleted(st.Round)
	}
	return st
}

// TestAttackRoundIDReusedAcrossFencers (a flaw an attack found, now held:
// round names carry a random part).
//
// Unsafe outcome: node x is tainted (and its pods then force-deleted) on
// testimonies that were written before the round's own Lease read, so they
// say nothing about whether x was heard after it. Round ids are
// node + "-" + a per-Fencer counter starting at 1, and a Fencer lives only
// in memory: a controller restart/failover, or the reconciler dropping the
// node's Fencer when it leaves the plan's targets, starts the counter again,
// so the second incident's first round is "x-1" again. A member whose agent
// answered the earlier "x-1" and has not rewritten its report since (its
// writes fail: APF throttling, an expired token, a webhook, a crash loop,
// while its kubelet still renews its Lease) still carries
// {round: x-1, silentFor: big} and is counted as a fresh witness.
func TestAttackRoundIDReusedAcrossFencers(t *testing.T) {
	l := list("x", "a", "b", "c")
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)

	// Incident 1 (controller replica 1, or the node's first Fencer).
	f1 := fencing.NewFencer("x", fencing.FencerOptions{})
	read1 := observation("1", "boot-1", true, l)
	stepAll(f1, fencing.Input{Now: 10 * s, Dead: true, Read: read1})
	pub := stepAll(f1, fencing.Input{Now: 10*s + wait, Dead: true, Read: read1})
	if pub.Action != fencing.PublishRound {
		t.Fatalf("incident 1: %s (%s), want PublishRound", pub.Action, pub.Reason)
	}
	// a and b answer round 1 (honestly, at 10s+wait+1s), then their
	// agents' report writes start failing. x comes back before the taint.
	stale := silent(pub.Round, 2*wait, "a", "b")
	if st := stepAll(f1, fencing.Input{Now: 10*s + wait + s, Dead: false, Read: read1}); st.Action != fencing.Hold {
		t.Fatalf("incident 1 ends: %s", st.Action)
	}

	// An hour later, x is cut off again (its Lease was renewed meanwhile:
	// a new version). x is in fact alive and talking to a and b over UDP
	// (they answer its probes, so it stays sanctioned), only cut from the
	// API. The controller restarted meanwhile (or x's Fencer was dropped).
	f2 := fencing.NewFencer("x", fencing.FencerOptions{})
	t2 := time.Hour
	read2 := observation("77", "boot-1", true, l)
	stepAll(f2, fencing.Input{Now: t2, Dead: true, Read: read2})
	pub2 := stepAll(f2, fencing.Input{Now: t2 + wait, Dead: true, Read: read2})
	if pub2.Action != fencing.PublishRound {
		t.Fatalf("incident 2: %s (%s), want PublishRound", pub2.Action, pub2.Reason)
	}
	if pub2.Round == pub.Round {
		t.Errorf("round id %q of the second incident repeats the first's: answers written an hour ago count for it", pub2.Round)
	}
	// The stale answers, written before read2, are all the Fencer sees.
	st := stepAll(f2, fencing.Input{Now: t2 + wait + s, Dead: true, Read: read2, Testimonies: stale})
	if st.Action == fencing.Taint {
		t.Errorf("UNSAFE: tainted x on testimonies written %s before the round's read (%s)", t2-(10*s+wait+s), st.Reason)
	}
}

// TestAttackSanctionHolds: PASSES (holds). Boundaries of the agent's rule.
func TestAttackSanctionHolds(t *testing.T) {
	tm := fencing.DefaultTiming()
	t.Run("holds: MayFeed refuses a keepalive with less than W left", func(t *testing.T) {
		sn := fencing.NewSanction("a", tm, list("a", "b", "c"))
		sn.Answered("b", 1*s)
		sn.Answered("c", 1*s)
		if sn.Until() != 17*s {
			t.Fatalf("until %s", sn.Until())
		}
		if !sn.MayFeed(7 * s) {
			t.Error("exactly W left should feed")
		}
		if sn.MayFeed(7*s + 1) {
			t.Error("fed with less than W left")
		}
		if sn.MayArm(7*s + 1) {
			t.Error("armed with less than W left")
		}
	})
	t.Run("holds: no disarm when not sanctioned, even with the report read back", func(t *testing.T) {
		sn := fencing.NewSanction("a", tm, list("a", "b", "c"))
		if sn.MayDisarm(0, true) {
			t.Error("disarmed never sanctioned")
		}
	})
	t.Run("holds: an older answer from the same member never moves the sanction", func(t *testing.T) {
		sn := fencing.NewSanction("a", tm, list("a", "b", "c"))
		sn.Answered("b", 5*s)
		sn.Answered("c", 5*s)
		u := sn.Until()
		sn.Answered("b", 1*s) // a replayed/delayed answer of an old probe
		if sn.Until() != u || !sn.PeersHold(20*s) {
			t.Errorf("until %s -> %s", u, sn.Until())
		}
	})
	t.Run("holds: a Lease read that sees nothing new never extends", func(t *testing.T) {
		sn := fencing.NewSanction("a", tm, list("a", "b", "c"))
		sn.LeaseRead(1*s, fencing.Renewal{RenewTime: "r1", Holder: "a"})
		sn.LeaseRead(3*s, fencing.Renewal{RenewTime: "r1", Holder: "a"})
		sn.LeaseRead(3*s, fencing.Renewal{RenewTime: "r2", Holder: "a"}) // same send time
		if sn.Until() != 0 {
			t.Errorf("until %s", sn.Until())
		}
	})
	t.Run("holds: a duplicate of the node in its list does not shrink the quorum", func(t *testing.T) {
		sn := fencing.NewSanction("a", tm, list("a", "a", "b", "b", "c"))
		sn.Answered("b", 1*s)
		if sn.PeersHold(2 * s) {
			t.Error("one of two others held")
		}
	})
}

// TestAttackFencerHolds: PASSES (holds). Rows where the controller's rule
// must not taint.
func TestAttackFencerHolds(t *testing.T) {
	l := list("x", "a", "b", "c")
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	open := 10*s + wait
	run := func(t *testing.T, read, later *fencing.Observation, ts []fencing.Testimony) fencing.Step {
		f := fencing.NewFencer("x", fencing.FencerOptions{})
		stepAll(f, fencing.Input{Now: 10 * s, Dead: true, Read: read})
		stepAll(f, fencing.Input{Now: open, Dead: true, Read: read})
		return stepAll(f, fencing.Input{Now: open + s, Dead: true, Read: later, Testimonies: ts})
	}
	read := observation("1", "boot-1", true, l)
	t.Run("holds: a testimony for a round not yet published (predicted id) before the wait", func(t *testing.T) {
		f := fencing.NewFencer("x", fencing.FencerOptions{})
		st := stepAll(f, fencing.Input{Now: 10 * s, Dead: true, Read: read, Testimonies: silent("x-1", time.Hour, "a", "b", "c")})
		if st.Action == fencing.Taint {
			t.Error("tainted before the wait")
		}
	})
	t.Run("holds: the report changes at the tainting pass", func(t *testing.T) {
		later := observation("1", "boot-1", true, l)
		later.Report.Version = "other"
		if st := run(t, read, later, silent("x-1", 2*wait, "a", "b")); st.Action == fencing.Taint {
			t.Error("tainted on a changed report")
		}
	})
	t.Run("holds: the boot changes at the tainting pass", func(t *testing.T) {
		later := observation("1", "boot-1", true, l)
		later.BootID = "boot-2"
		if st := run(t, read, later, silent("x-1", 2*wait, "a", "b")); st.Action == fencing.Taint {
			t.Error("tainted on a changed boot")
		}
	})
	t.Run("holds: report names a new list that the witnesses are not a majority of", func(t *testing.T) {
		l2 := fencing.List{Number: 2, Members: []string{"x", "a", "b", "d", "e"}}
		r := observation("1", "boot-1", true, l2, l)
		if st := run(t, r, r, silent("x-1", 2*wait, "a", "c")); st.Action == fencing.Taint {
			t.Error("tainted on a minority of list 2")
		}
	})
	t.Run("holds: a report with timing zero cannot be waited out", func(t *testing.T) {
		rep := fencing.ReportFromAPI("1", nil)
		if rep != nil {
			t.Fatal("nil report not nil")
		}
	})
}
