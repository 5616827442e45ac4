package gossip

import (
	"testing"
	"time"
)

// TestAttackLossProbeNotRetried: S16 with node-0, the one agent that
// reaches the API, a ring watcher of a live node whose Lease the plane
// lost. Its one loss probe goes unanswered (the network event that cut
// the API path drops a few packets, the member's agent is in a GC pause,
// or only its host answers): no rewrite, and no further probe while the
// node stays lost; the membership, which has the node alive throughout,
// never asks again. node-0's Alive read of it is then from before the loss
// until the next report-interval refresh (60 s): the controller has no
// evidence of life for up to a minute, and a 0 s policy (S13's TwoPlanes
// lane in S16) strands the live node's pods at its NotReady flip.
// A witness that is not a ring watcher retries every recheck
// (probedWitness); a ring watcher's loss probe should too, until the
// member answers or the membership has it dead.
func TestAttackLossProbeNotRetried(t *testing.T) {
	all := names("node", 8)
	now := t0.Add(time.Minute)
	for name, first := range map[string]probeResult{"member and host silent": hostSilent, "member silent, host answers": hostAnswered} {
		tr, target := ringOf(t, "node-0", all[1:]...)
		seen := func(at time.Time) []probeTarget {
			tr.leasesSeen(leasesAt(at, all, []string{target}, nil), at)
			tr.update(at)
			return tr.due(at)
		}
		tr.leasesSeen(leasesAt(now, all, nil, nil), now)
		tr.update(now)
		if due := seen(now.Add(time.Second)); len(due) != 1 {
			t.Fatalf("setup: probes %+v, want the loss probe", due)
		}
		tr.probed(target, first, now.Add(time.Second))
		_ = tr.takeRewrite()
		// The member answers from the next look on: within a few
		// rechecks, a probe must be due and its answer rewrite the read.
		rewritten := false
		for s := 2; s <= 10 && !rewritten; s++ {
			at := now.Add(time.Duration(s) * time.Second)
			for _, p := range seen(at) {
				if p.node == target {
					tr.probed(target, memberAnswered, at)
				}
			}
			rewritten = tr.takeRewrite()
		}
		if !rewritten {
			t.Errorf("first loss probe: %s: %s, alive in the membership and answering from 1 s later, got no Alive read written after its loss within 10 s", name, target)
		}
	}
}
