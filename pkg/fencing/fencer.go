package fencing

import (
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is what the controller reads, by quorum, of a node agent's
// fencing report.
type Report struct {
	// Version is the report object's resourceVersion: any write changes it.
	Version string `json:"version"`
	// Armed: the agent's watchdog is armed, and it feeds only while
	// sanctioned.
	Armed bool `json:"armed"`
	// Timing is the W the device read back and the T the agent uses.
	Timing Timing `json:"timing"`
	// BootID is the node's boot ID as the agent read it.
	BootID string `json:"bootID"`
	// Lists are every member list the agent may be counting against:
	// while it switches lists, the old one and the new one.
	Lists []List `json:"lists"`
}

// Observation is one quorum read by the controller of what a fencing
// decision compares: the node's Lease (any write to it counts as a
// change, a renewal or not), the Node's boot ID, and the agent's report.
type Observation struct {
	LeaseVersion string
	BootID       string
	// Report is nil when the agent has none.
	Report *Report
}

func (o Observation) same(p Observation) bool {
	if o.LeaseVersion != p.LeaseVersion || o.BootID != p.BootID || (o.Report == nil) != (p.Report == nil) {
		return false
	}
	return o.Report == nil || o.Report.Version == p.Report.Version
}

// Testimony is a member's answer to a fencing round: how long it has
// heard nothing from the node, in either direction, on its own boot clock
// and capped at its own process's uptime (an agent that restarted forgets
// whom it heard).
type Testimony struct {
	Member string `json:"member"`
	// Round is the round the answer names; answers to other rounds (or
	// written before this one was published) do not count.
	Round string `json:"round"`
	// SilentFor is how long the member had heard nothing from the node
	// when it answered.
	SilentFor time.Duration `json:"silentFor"`
	// LeaseRenewing: the controller sees the member's own Lease renewing.
	// Only members that are alive and reach the API testify.
	LeaseRenewing bool `json:"leaseRenewing"`
}

// Action is what a fencing step asks of the executor.
type Action string

const (
	// Hold: do nothing now; come back at NextCheck.
	Hold Action = "Hold"
	// PublishRound: ask the members to testify about the node, naming
	// Step.Round. Call Fencer.Published once it is written.
	PublishRound Action = "PublishRound"
	// Taint: put node.kubernetes.io/out-of-service=nodeshutdown:NoExecute
	// on the node, recording Step.BootID as the boot it fences. Then
	// re-read by quorum and step again before anything is deleted.
	Taint Action = "Taint"
	// DeletePods: the taint is on and a re-read after it found nothing
	// changed since the round's read: force-delete the node's pods with
	// identity or exclusive storage.
	DeletePods Action = "DeletePods"
	// Untaint: the node is back with a new boot ID, Ready, and none of its
	// old pods remain.
	Untaint Action = "Untaint"
)

// Input is one pass's view of a node, for its Fencer.
type Input struct {
	// Now is the controller's boot clock.
	Now time.Duration
	// Dead: the judge says dead on both planes.
	Dead bool
	// Read is a quorum read made in this pass; nil when it failed.
	Read *Observation
	// Testimonies are the members' answers read in this pass.
	Testimonies []Testimony
	// FencedBoot is the boot ID recorded with an out-of-service taint that
	// rebound put on the node, whichever replica put it; empty when the
	// node has no such taint.
	FencedBoot string
	// Ready: the node is Ready now.
	Ready bool
	// OldPods counts the pods still bound to the node that were created
	// before its taint.
	OldPods int
}

// Step is a Fencer's answer for one pass.
type Step struct {
	Action Action
	// Round names the round to publish, or the round a taint or delete
	// belongs to.
	Round string
	// BootID is the boot a taint fences.
	BootID string
	// Reason says why, for Events, logs and diagnose.
	Reason string
	// NextCheck is when the node should be stepped again, on the
	// controller's clock; zero means on the next change.
	NextCheck time.Duration
	// OpensAt is when the current round may fence, on the controller's
	// clock; zero when there is no round.
	OpensAt time.Duration
}

// FencerOptions tune a Fencer. The zero value means the defaults.
type FencerOptions struct {
	// Margin beyond T + 2W; zero means DefaultFenceMargin.
	Margin time.Duration
	// MinWitnesses is the fewest members that must testify, however short
	// the list: no single member decides a fencing. Zero means 2.
	MinWitnesses int
}

// Fencer is the controller's rule for one node. It lives in the
// controller's memory only: a replica that takes over starts its rounds
// again from its own reads, and a taint it did not put itself is never a
// reason for it to delete.
type Fencer struct {
	node string
	opts FencerOptions

	round *round
	seq   int
	// recheck is how long the Fencer last asked to wait before looking
	// again at a node back on a new boot that is not ready for the taint
	// to come off: it doubles, so that an old pod stuck for hours costs a
	// read every few minutes, not every few seconds.
	recheck time.Duration
}

type round struct {
	id        string
	t         time.Duration
	read      Observation
	published bool
	tainted   bool
	deleted   bool
}

// NewFencer returns the fencing rule for node.
func NewFencer(node string, opts FencerOptions) *Fencer {
	if opts.Margin == 0 {
		opts.Margin = DefaultFenceMargin
	}
	if opts.MinWitnesses == 0 {
		opts.MinWitnesses = 2
	}
	return &Fencer{node: node, opts: opts}
}

// Published records that the round id was written for the members.
func (f *Fencer) Published(id string) {
	if f.round != nil && f.round.id == id {
		f.round.published = true
	}
}

// Tainted records that the taint of the round id is on the node.
func (f *Fencer) Tainted(id string) {
	if f.round != nil && f.round.id == id {
		f.round.tainted = true
	}
}

// Deleted records that the pods of the round id were deleted.
func (f *Fencer) Deleted(id string) {
	if f.round != nil && f.round.id == id {
		f.round.deleted = true
	}
}

// Asking returns the round the Fencer waits for testimonies in: published
// and not acted on yet. It stays in the document while so.
func (f *Fencer) Asking() (string, bool) {
	if f.round != nil && f.round.published && !f.round.tainted {
		return f.round.id, true
	}
	return "", false
}

// Reset forgets the current round (a replica that loses leadership).
func (f *Fencer) Reset() { f.round = nil }

// roundID names a new round: the node, this Fencer's count, and a random
// part, so that no round of another Fencer (a replica that took over, a
// restart, the node's next incident) ever has the same name, and an
// answer written for an earlier round never counts for this one.
func (f *Fencer) roundID() string {
	return f.node + "-" + strconv.Itoa(f.seq) + "-" + strings.ToLower(rand.Text()[:10])
}

// Step decides what to do about the node now.
func (f *Fencer) Step(in Input) Step {
	if in.FencedBoot != "" && (f.round == nil || !f.round.tainted) {
		// A taint of rebound's that this Fencer did not verify: it never
		// leads to a delete here, only to its removal once the node is
		// back on another boot.
		return f.untaint(in)
	}
	if f.round != nil && f.round.deleted {
		return f.untaint(in)
	}
	if !in.Dead {
		if f.round != nil && f.round.tainted {
			// The taint stays; a kubelet refuses the pods that do not
			// tolerate it. It goes only on a new boot.
			return f.untaint(in)
		}
		f.round = nil
		return Step{Action: Hold, Reason: "not dead on both planes"}
	}
	if in.Read == nil {
		return Step{Action: Hold, Reason: "the quorum read of the Lease, Node and report failed", NextCheck: in.Now + time.Second}
	}
	if f.round == nil || !f.round.read.same(*in.Read) {
		if f.round != nil && f.round.tainted {
			// Something changed after the taint: keep it, delete nothing.
			return Step{Action: Hold, Round: f.round.id, Reason: "the Lease, boot ID or report changed after the taint: the taint stays, nothing is deleted"}
		}
		f.seq++
		f.round = &round{id: f.roundID(), t: in.Now, read: *in.Read}
	}
	r := f.round
	rep := r.read.Report
	if rep == nil || !rep.Armed {
		return Step{Action: Hold, Reason: "the node's agent does not report an armed watchdog"}
	}
	if rep.BootID != r.read.BootID {
		// An armed report of an earlier boot says nothing of this one,
		// whose agent may not have armed.
		return Step{Action: Hold, Reason: fmt.Sprintf("the agent's report is of boot %q, the node runs %q", rep.BootID, r.read.BootID)}
	}
	if len(rep.Lists) == 0 {
		return Step{Action: Hold, Reason: "the agent's report names no member list"}
	}
	opensAt := r.t + rep.Timing.FenceWait(f.opts.Margin)
	if in.Now < opensAt {
		return Step{Action: Hold, Round: r.id, OpensAt: opensAt, NextCheck: opensAt,
			Reason: fmt.Sprintf("waiting out T + 2W + margin (%s) from the Lease read", rep.Timing.FenceWait(f.opts.Margin).Round(time.Millisecond))}
	}
	if !r.published {
		return Step{Action: PublishRound, Round: r.id, OpensAt: opensAt, Reason: "asking the members whether they hear the node"}
	}
	if !r.tainted && in.Now > opensAt+rep.Timing.Sanction {
		// A member that heard the node after the round's read can never
		// testify to silence since it: start again from a read made now.
		f.seq++
		f.round = &round{id: f.roundID(), t: in.Now, read: *in.Read}
		return Step{Action: Hold, Round: f.round.id, OpensAt: in.Now + rep.Timing.FenceWait(f.opts.Margin), NextCheck: in.Now + rep.Timing.FenceWait(f.opts.Margin),
			Reason: "the members did not testify within T of the round; starting again from a new read"}
	}
	if r.tainted {
		return Step{Action: DeletePods, Round: r.id, BootID: r.read.BootID, OpensAt: opensAt,
			Reason: "tainted, and the Lease, boot ID and report are unchanged since the round's read"}
	}
	need := stretch(in.Now-r.t, 2)
	for _, l := range rep.Lists {
		got, missing := f.witnesses(l, r.id, need, in.Testimonies)
		if q := max(l.Quorum(f.node), f.opts.MinWitnesses); got < q {
			return Step{Action: Hold, Round: r.id, OpensAt: opensAt, NextCheck: in.Now + time.Second,
				Reason: fmt.Sprintf("%d of list %d's members (need %d) testify to hearing nothing from the node for %s; not yet: %s",
					got, l.Number, q, need.Round(time.Millisecond), strings.Join(missing, ", "))}
		}
	}
	return Step{Action: Taint, Round: r.id, BootID: r.read.BootID, OpensAt: opensAt,
		Reason: fmt.Sprintf("dead on both planes, armed (W %s, T %s), and a strict majority of every member list heard nothing from it since the round's read", rep.Timing.Watchdog, rep.Timing.Sanction)}
}

// witnesses counts the members of l (the node left out) whose answer to
// round testifies to at least need of silence, from a renewing Lease.
func (f *Fencer) witnesses(l List, id string, need time.Duration, ts []Testimony) (int, []string) {
	got := 0
	var missing []string
	for _, m := range l.others(f.node) {
		i := slices.IndexFunc(ts, func(t Testimony) bool {
			return t.Member == m && t.Round == id && t.LeaseRenewing && t.SilentFor >= need
		})
		if i >= 0 {
			got++
		} else {
			missing = append(missing, m)
		}
	}
	return got, missing
}

// untaintRecheck and maxUntaintRecheck bound how long a node back on a
// new boot waits before it is looked at again while its old pods go.
const (
	untaintRecheck    = 2 * time.Second
	maxUntaintRecheck = 5 * time.Minute
)

func (f *Fencer) backoff() time.Duration {
	f.recheck = min(max(2*f.recheck, untaintRecheck), maxUntaintRecheck)
	return f.recheck
}

func (f *Fencer) untaint(in Input) Step {
	boot := in.FencedBoot
	if boot == "" && f.round != nil && f.round.tainted {
		boot = f.round.read.BootID
	}
	switch {
	case boot == "":
		return Step{Action: Hold, Reason: "no taint of rebound's"}
	case in.Read == nil:
		return Step{Action: Hold, Reason: "fenced; the quorum read failed", NextCheck: in.Now + time.Second}
	case in.Read.BootID == boot:
		return Step{Action: Hold, Reason: "fenced; the node has not come back on a new boot"}
	case !in.Ready:
		return Step{Action: Hold, Reason: "fenced; back on a new boot but not Ready", NextCheck: in.Now + f.backoff()}
	case in.OldPods > 0:
		// Nothing the reconciler watches changes when the last old pod
		// goes: look again.
		return Step{Action: Hold, Reason: fmt.Sprintf("fenced; %d of its old pods remain", in.OldPods), NextCheck: in.Now + f.backoff()}
	}
	f.round, f.recheck = nil, 0
	return Step{Action: Untaint, Reason: "back on a new boot, Ready, and none of its old pods remain"}
}
