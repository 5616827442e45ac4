package fencing_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"rebound/pkg/fencing"
)

const s = time.Second

func TestTimingValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		timing fencing.Timing
		want   string // substring of the error; empty: valid
	}{
		{"defaults", fencing.DefaultTiming(), ""},
		{"sanction shorter than a renewal and three polls", fencing.Timing{Watchdog: 10 * s, Sanction: 15 * s}, "--sanction-window=15s"},
		{"watchdog under a second", fencing.Timing{Watchdog: 500 * time.Millisecond, Sanction: 16 * s}, "--watchdog-timeout=500ms: must be at least 1s"},
		{"watchdog not whole seconds", fencing.Timing{Watchdog: 10500 * time.Millisecond, Sanction: 16 * s}, "whole seconds"},
		{"watchdog shorter than two polls", fencing.Timing{Watchdog: 3 * s, Sanction: 16 * s}, "at least two polls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.timing.Validate(fencing.DefaultKubeletRenewInterval, fencing.DefaultPollInterval)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestFenceWaitCoversTheSanctionAndTwoWatchdogs(t *testing.T) {
	tm := fencing.DefaultTiming()
	got := tm.FenceWait(fencing.DefaultFenceMargin)
	if min := tm.Sanction + 2*tm.Watchdog + fencing.DefaultFenceMargin; got <= min {
		t.Fatalf("FenceWait = %s, want more than T + 2W + margin = %s (clock rates)", got, min)
	}
	// With the defaults the pod still lands within a minute of a death
	// seen in about 6 s: 6 + wait + a few seconds to recreate.
	if got > 40*s {
		t.Fatalf("FenceWait = %s: the defaults no longer fit 60 s", got)
	}
}

func list(members ...string) fencing.List { return fencing.List{Number: 1, Members: members} }

func TestSanction(t *testing.T) {
	tm := fencing.DefaultTiming() // W 10 s, T 16 s
	members := list("a", "b", "c", "d", "e")
	type read struct {
		at   time.Duration
		renw string
	}
	type answer struct {
		member string
		at     time.Duration
	}
	for _, tc := range []struct {
		name      string
		reads     []read
		answers   []answer
		now       time.Duration
		until     time.Duration
		mayFeed   bool
		peersHold bool
	}{
		{name: "nothing seen", now: 1 * s},
		{name: "one read is not a renewal", reads: []read{{1 * s, "r1"}}, now: 2 * s},
		{name: "two reads of the same renewal", reads: []read{{1 * s, "r1"}, {3 * s, "r1"}}, now: 4 * s},
		{name: "a renewal between two reads counts from the earlier send",
			reads: []read{{1 * s, "r1"}, {3 * s, "r2"}}, now: 4 * s, until: 17 * s, mayFeed: true},
		{name: "at least W must remain to feed",
			reads: []read{{1 * s, "r1"}, {3 * s, "r2"}}, now: 7*s + time.Millisecond, until: 17 * s},
		{name: "a read out of order never extends",
			reads: []read{{5 * s, "r1"}, {3 * s, "r2"}}, now: 6 * s},
		{name: "a strict majority of the others answered",
			answers: []answer{{"b", 1 * s}, {"c", 2 * s}, {"d", 3 * s}}, now: 4 * s, until: 17 * s, mayFeed: true, peersHold: true},
		{name: "half of the others is not a majority",
			answers: []answer{{"b", 1 * s}, {"c", 2 * s}}, now: 3 * s},
		{name: "the node itself never counts",
			answers: []answer{{"a", 1 * s}, {"b", 1 * s}, {"c", 2 * s}}, now: 3 * s},
		{name: "a stranger to the list never counts",
			answers: []answer{{"x", 1 * s}, {"b", 1 * s}, {"c", 2 * s}}, now: 3 * s},
		{name: "the quorum-th most recent answer sets the end",
			answers: []answer{{"b", 1 * s}, {"c", 2 * s}, {"d", 3 * s}, {"e", 9 * s}, {"b", 8 * s}},
			now:     9 * s, until: 19 * s, mayFeed: true, peersHold: true},
		{name: "peers no longer hold once their answers are T old",
			answers: []answer{{"b", 1 * s}, {"c", 2 * s}, {"d", 3 * s}}, now: 17 * s, until: 17 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sn := fencing.NewSanction("a", tm, members)
			for _, r := range tc.reads {
				sn.LeaseRead(r.at, fencing.Renewal{RenewTime: r.renw, Holder: "a"})
			}
			for _, a := range tc.answers {
				sn.Answered(a.member, a.at)
			}
			if got := sn.Until(); got != tc.until {
				t.Errorf("Until = %s, want %s", got, tc.until)
			}
			if got := sn.MayFeed(tc.now); got != tc.mayFeed {
				t.Errorf("MayFeed(%s) = %v, want %v", tc.now, got, tc.mayFeed)
			}
			if got := sn.PeersHold(tc.now); got != tc.peersHold {
				t.Errorf("PeersHold(%s) = %v, want %v", tc.now, got, tc.peersHold)
			}
			if got, want := sn.MayArm(tc.now), tc.mayFeed && tc.peersHold; got != want {
				t.Errorf("MayArm = %v, want %v", got, want)
			}
		})
	}
}

func TestSanctionDisarmsOnlyWhileSanctionedAfterTheReport(t *testing.T) {
	sn := fencing.NewSanction("a", fencing.DefaultTiming(), list("a", "b", "c"))
	sn.Answered("b", 1*s)
	sn.Answered("c", 1*s)
	if sn.MayDisarm(2*s, false) {
		t.Error("disarms before the disarmed report was read back")
	}
	if !sn.MayDisarm(2*s, true) {
		t.Error("does not disarm while sanctioned, report read back")
	}
	if sn.MayDisarm(17*s, true) {
		t.Error("disarms after the sanction ended: the controller may be about to fence")
	}
}

func TestSanctionSwitchListForgetsTheOldAnswers(t *testing.T) {
	sn := fencing.NewSanction("a", fencing.DefaultTiming(), list("a", "b", "c"))
	sn.Answered("b", 1*s)
	sn.SwitchList(fencing.List{Number: 2, Members: []string{"a", "b", "c", "d", "e"}})
	sn.Answered("c", 2*s)
	sn.Answered("d", 2*s)
	if sn.PeersHold(3 * s) {
		t.Error("an answer to the old list counts toward the new one")
	}
	sn.Answered("e", 2*s)
	if !sn.PeersHold(3 * s) {
		t.Error("three of four answered on the new list, and peers do not hold")
	}
}

// fencer steps a Fencer for node "x" through a pass.
type pass struct {
	now        time.Duration
	dead       bool
	read       *fencing.Observation
	testimony  []fencing.Testimony
	fencedBoot string
	ready      bool
	oldPods    int
	want       fencing.Action
	reason     string // substring
}

func observation(lease, boot string, armed bool, lists ...fencing.List) *fencing.Observation {
	return &fencing.Observation{LeaseVersion: lease, BootID: boot,
		Report: &fencing.Report{Version: "r" + lease + boot, Armed: armed, Timing: fencing.DefaultTiming(), BootID: boot, Lists: lists}}
}

func silent(round string, d time.Duration, members ...string) []fencing.Testimony {
	var out []fencing.Testimony
	for _, m := range members {
		out = append(out, fencing.Testimony{Member: m, Round: round, SilentFor: d, LeaseRenewing: true})
	}
	return out
}

func TestFencer(t *testing.T) {
	l := list("x", "a", "b", "c")
	read := observation("1", "boot-1", true, l)
	wait := fencing.DefaultTiming().FenceWait(fencing.DefaultFenceMargin)
	open := 10*s + wait
	for _, tc := range []struct {
		name   string
		passes []pass
	}{
		{"not dead holds", []pass{{now: 10 * s, read: read, want: fencing.Hold, reason: "not dead"}}},
		{"waits out T + 2W + margin from its own read", []pass{
			{now: 10 * s, dead: true, read: read, want: fencing.Hold, reason: "waiting out"},
			{now: open - time.Millisecond, dead: true, read: read, want: fencing.Hold, reason: "waiting out"},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
		}},
		{"unarmed holds", []pass{{now: 10 * s, dead: true, read: observation("1", "boot-1", false, l), want: fencing.Hold, reason: "armed"}}},
		{"a report of another boot holds", []pass{{now: 10 * s, dead: true,
			read: &fencing.Observation{LeaseVersion: "1", BootID: "boot-2", Report: read.Report}, want: fencing.Hold, reason: "boot"}}},
		{"a failed read holds", []pass{{now: 10 * s, dead: true, want: fencing.Hold, reason: "failed"}}},
		{"a strict majority testifying taints, then deletes", []pass{
			{now: 10 * s, dead: true, read: read, want: fencing.Hold},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
			{now: open + s, dead: true, read: read, testimony: silent("x-1", 2*wait, "a", "b"), want: fencing.Taint},
			{now: open + 2*s, dead: true, read: read, fencedBoot: "boot-1", want: fencing.DeletePods},
		}},
		{"testimony shorter than the time since the read does not count", []pass{
			{now: 10 * s, dead: true, read: read},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
			{now: open + s, dead: true, read: read, testimony: silent("x-1", wait, "a", "b"), want: fencing.Hold, reason: "testify"},
		}},
		{"testimony to another round does not count", []pass{
			{now: 10 * s, dead: true, read: read},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
			{now: open + s, dead: true, read: read, testimony: silent("x-0", 2*wait, "a", "b"), want: fencing.Hold},
		}},
		{"a member whose Lease does not renew does not count", []pass{
			{now: 10 * s, dead: true, read: read},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
			{now: open + s, dead: true, read: read, testimony: append(silent("x-1", 2*wait, "a"),
				fencing.Testimony{Member: "b", Round: "x-1", SilentFor: 2 * wait}), want: fencing.Hold},
		}},
		{"the node never testifies for itself", []pass{
			{now: 10 * s, dead: true, read: read},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
			{now: open + s, dead: true, read: read, testimony: silent("x-1", 2*wait, "a", "x"), want: fencing.Hold},
		}},
		{"a majority of every list the report names", []pass{
			{now: 10 * s, dead: true, read: observation("1", "boot-1", true, fencing.List{Number: 2, Members: []string{"x", "a", "b", "d", "e", "f"}}, l)},
			{now: open, dead: true, read: observation("1", "boot-1", true, fencing.List{Number: 2, Members: []string{"x", "a", "b", "d", "e", "f"}}, l), want: fencing.PublishRound},
			{now: open + s, dead: true, read: observation("1", "boot-1", true, fencing.List{Number: 2, Members: []string{"x", "a", "b", "d", "e", "f"}}, l),
				testimony: silent("x-1", 2*wait, "a", "b"), want: fencing.Hold, reason: "list 2"},
		}},
		{"two witnesses at least, however short the list", []pass{
			{now: 10 * s, dead: true, read: observation("1", "boot-1", true, list("x", "a"))},
			{now: open, dead: true, read: observation("1", "boot-1", true, list("x", "a")), want: fencing.PublishRound},
			{now: open + s, dead: true, read: observation("1", "boot-1", true, list("x", "a")), testimony: silent("x-1", 2*wait, "a"), want: fencing.Hold},
		}},
		{"a write to the Lease starts the wait again", []pass{
			{now: 10 * s, dead: true, read: read},
			{now: open, dead: true, read: observation("2", "boot-1", true, l), want: fencing.Hold, reason: "waiting out"},
		}},
		{"a change after the taint keeps it and deletes nothing", []pass{
			{now: 10 * s, dead: true, read: read},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
			{now: open + s, dead: true, read: read, testimony: silent("x-1", 2*wait, "a", "b"), want: fencing.Taint},
			{now: open + 2*s, dead: true, read: observation("2", "boot-1", true, l), fencedBoot: "boot-1", want: fencing.Hold, reason: "taint stays"},
		}},
		{"a taint this Fencer did not verify never leads to a delete", []pass{
			{now: 10 * s, dead: true, read: read, fencedBoot: "boot-1", want: fencing.Hold, reason: "not come back"},
		}},
		{"untaint only on a new boot, Ready, with no old pods", []pass{
			{now: 10 * s, read: observation("5", "boot-1", true, l), fencedBoot: "boot-1", ready: true, want: fencing.Hold, reason: "new boot"},
			{now: 11 * s, read: observation("6", "boot-2", true, l), fencedBoot: "boot-1", want: fencing.Hold, reason: "not Ready"},
			{now: 12 * s, read: observation("6", "boot-2", true, l), fencedBoot: "boot-1", ready: true, oldPods: 1, want: fencing.Hold, reason: "old pods"},
			{now: 13 * s, read: observation("6", "boot-2", true, l), fencedBoot: "boot-1", ready: true, want: fencing.Untaint},
		}},
		{"members that never testify: a new round from a new read", []pass{
			{now: 10 * s, dead: true, read: read},
			{now: open, dead: true, read: read, want: fencing.PublishRound},
			{now: open + fencing.DefaultSanctionWindow + s, dead: true, read: read, want: fencing.Hold, reason: "starting again"},
			{now: open + fencing.DefaultSanctionWindow + 2*s, dead: true, read: read, testimony: silent("x-1", 10*wait, "a", "b"), want: fencing.Hold, reason: "waiting out"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fencing.NewFencer("x", fencing.FencerOptions{})
			// The rows name rounds "x-1", "x-2": the first, second round
			// this Fencer published (round names carry a random part).
			published := map[string]string{}
			for i, p := range tc.passes {
				var testimony []fencing.Testimony
				for _, m := range p.testimony {
					if id, ok := published[m.Round]; ok {
						m.Round = id
					}
					testimony = append(testimony, m)
				}
				step := f.Step(fencing.Input{Now: p.now, Dead: p.dead, Read: p.read, Testimonies: testimony,
					FencedBoot: p.fencedBoot, Ready: p.ready, OldPods: p.oldPods})
				if p.want != "" && step.Action != p.want {
					t.Fatalf("pass %d: %s (%s), want %s", i, step.Action, step.Reason, p.want)
				}
				if p.reason != "" && !strings.Contains(step.Reason, p.reason) {
					t.Fatalf("pass %d: reason %q, want it to contain %q", i, step.Reason, p.reason)
				}
				switch step.Action {
				case fencing.PublishRound:
					published["x-"+strconv.Itoa(len(published)+1)] = step.Round
					f.Published(step.Round)
				case fencing.Taint:
					f.Tainted(step.Round)
				case fencing.DeletePods:
					f.Deleted(step.Round)
				}
			}
		})
	}
}
