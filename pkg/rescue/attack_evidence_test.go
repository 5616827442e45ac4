package rescue

import (
	"fmt"
	"testing"
	"time"

	"rebound/pkg/liveness"
)

// TestAttackLingeringSessionIsNoLife: S16 with node-4 really dead, and
// node-0, the one observer that reaches the API, still lists its BGP
// session with node-4 Established since before the death: BIRD without
// BFD ends a dead peer's session only at its hold time (240 s by default,
// Calico's too). liveness says so: Unknown, with a Veto ("not dead while
// a live observer has a session with it"), and no first-hand life
// (firstHandLife refuses a session older than the NotReady transition
// within the hold time). Before the change rescue held only a
// CutOffFromAPI node and rescued node-4's pod after the policy; now the
// Veto rule counts as evidence of life and node-4's pod is Held until the
// hold time runs out: S16's dead worker is not rescued after the policy.
func TestAttackLingeringSessionIsNoLife(t *testing.T) {
	const dns4 = "dns-4-5d4f-x1"
	lingering := func(w *world) {
		nv := w.s.Verdicts["node-4"]
		nv.Verdict = liveness.Unknown
		nv.Veto = "node-0 reports its session with it Established (BFD none)"
		nv.Reason = fmt.Sprintf("NotReady since %s (rebound's own observation); not dead while a live observer has a session with it: %s", t0.Format(time.RFC3339), nv.Veto)
		w.s.Verdicts["node-4"] = nv
	}
	decisions := map[string]Decision{dns4: DecisionAct}
	for i := 1; i <= 5; i++ {
		if i != 4 {
			decisions[fmt.Sprintf("dns-%d-5d4f-x1", i)] = DecisionHeld
		}
	}
	runPlanCases(t, []planCase{
		{
			name: "S16, node-4 dead, node-0's pre-death session with it lingering (Veto, no first-hand life): rescued after the policy",
			world: func() *world {
				w := s16(at(time.Minute))
				lingering(w)
				return w
			},
			decisions: decisions,
			actions:   []string{"Delete kube-system/" + dns4},
			nextCheck: at(time.Minute + evidenceRecheck),
		},
	})
}
