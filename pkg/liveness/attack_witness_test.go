package liveness

import (
	"testing"
	"time"
)

// TestAttackWitnessClockBehind: S16 with node-0's agent clock 25 s behind
// rebound's (inside MaxClockSkew, so its reports are fresh). node-0's
// gossip read was written 3 s after the workers' Leases went stale (30 s
// ago on rebound's clock), and has every worker Alive by its own probes
// after the loss; its ObservedAt, on its clock, says 55 s ago. That read
// is evidence of life first-hand, taken after the loss: the workers must
// be CutOffFromAPI. Judging a witness's Alive read by the agent's own
// ObservedAt against the loss on rebound's clock throws it away: the
// workers are Unknown, stranded after maxUnavailableTime, and their pods
// deleted where upstream (PartialDisruption) evicts nothing. Dead votes
// are already timed on rebound's clock (Distrust.DeadSeen); Alive reads
// are not.
func TestAttackWitnessClockBehind(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration // the witness agent's clock minus rebound's
	}{
		{name: "witness clock on time (control)", skew: 0},
		{name: "witness clock 25 s behind", skew: -25 * time.Second},
		{name: "witness clock 25 s ahead", skew: 25 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := partitioned(6)
			// Written 30 s ago on rebound's clock: 3 s after the loss
			// (Leases renewed 45 s ago, stale 33 s ago).
			in.Reports[0].Gossip.ObservedAt = ago(30 * time.Second).Add(tc.skew)
			// The controller's history: it first saw the read when it
			// was written, 30 s ago on its own clock.
			in.Distrust = &Distrust{Since: ago(time.Hour), DeadSeen: map[string]time.Time{
				ReadSeenKey("node-0", in.Reports[0].Gossip.ObservedAt): ago(30 * time.Second)}}
			a := Assess(in, t0)
			for _, name := range names(in)[1:] {
				v := a.Of(name)
				if _, alive := v.EvidenceOfLife(); !alive {
					t.Errorf("%s: %s, no evidence of life though node-0 probed it alive after the loss: %s", name, v.Verdict, v.Reason)
				}
			}
		})
	}
}

// TestAttackWitnessAfterRestart: S16 five minutes in, and the controller
// restarts. Every worker's Lease is a first sight (the restart, 15 s ago:
// stale now), node-0's renewal has been watched since, and node-0's last
// read, written 40 s ago (its agent writes on change and every report
// interval, 60 s), has every worker Alive by its own probes, minutes
// after the workers went NotReady in the API. That read was taken after
// the loss: it is evidence of life. A restarted judge that dates the loss
// from its own first sight of the Lease throws it away for up to a
// report interval, and with S13's 0 s policy (its clock starting at
// rebound's first sight) the live workers' pods are stranded at once.
func TestAttackWitnessAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		read time.Duration // node-0's read, ago
	}{
		{name: "node-0's read written after the restart (control)", read: time.Second},
		{name: "node-0's read written before the restart, minutes after the loss", read: 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := partitioned(6)
			in.Reports[0].Gossip.ObservedAt = ago(tc.read)
			for _, name := range names(in)[1:] {
				in.Leases[name] = Lease{RenewSeen: ago(15 * time.Second), RenewInterval: 10 * time.Second, FirstSight: true}
				in.FirstSeen[name] = ago(15 * time.Second)
			}
			for i := range in.Nodes[1:] {
				in.Nodes[i+1].Transition = ago(5 * time.Minute)
			}
			// The other agents' reads are older still (cut off before the loss).
			for i := range in.Reports[1:] {
				in.Reports[i+1].Gossip.ObservedAt = ago(170 * time.Second)
			}
			// The restarted controller's history: it began 15 s ago, and
			// first saw each read then, or when it was written since.
			in.Distrust = &Distrust{Since: ago(15 * time.Second), DeadSeen: map[string]time.Time{}}
			for _, r := range in.Reports {
				in.Distrust.DeadSeen[ReadSeenKey(r.Reporter, r.Gossip.ObservedAt)] = latestOf(ago(15*time.Second), r.Gossip.ObservedAt)
			}
			a := Assess(in, t0)
			for _, name := range names(in)[1:] {
				v := a.Of(name)
				if _, alive := v.EvidenceOfLife(); !alive {
					t.Errorf("%s: %s, no evidence of life though node-0 probed it alive minutes after it went NotReady: %s", name, v.Verdict, v.Reason)
				}
			}
		})
	}
}

// TestAttackWitnessHostAnswers: S16, and node-3's agent is down (crash
// looping, OOM-killed) while node-3 runs: node-0, the one node that
// reaches the API, probes it after the loss, its member is silent but its
// host's kubelet port answers (MemberDown). The kubelet answering after
// the loss is first-hand sight of a live node, the same fact the
// self-silenced rule counts as "answering" (planes.answersAfter); yet it
// is no evidence of life here: node-3 is Unknown, stranded after the
// policy, its pods deleted and itself pruned, where upstream
// (PartialDisruption) evicts nothing. Row two: the guard that a witness's
// Dead read of a really dead node-3 is no evidence either (S16's dead
// worker is rescued after the policy).
func TestAttackWitnessHostAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state string
		alive bool
	}{
		{name: "node-0 reads node-3's host answering, its member silent (MemberDown): alive", state: GossipMemberDown, alive: true},
		{name: "guard: node-0 reads node-3 Dead (host silent): no evidence of life", state: GossipDead, alive: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := partitioned(6)
			g := in.Reports[0].Gossip
			for i := range g.Watches {
				if g.Watches[i].Node == "node-3" {
					g.Watches[i].State, g.Watches[i].Since = tc.state, ago(20*time.Second)
				}
			}
			v := Assess(in, t0).Of("node-3")
			if _, alive := v.EvidenceOfLife(); alive != tc.alive {
				t.Fatalf("node-3 evidence of life %v, want %v: %s: %s", alive, tc.alive, v.Verdict, v.Reason)
			}
		})
	}
}

func latestOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
