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
