package diagnose

import (
	"fmt"
	"time"

	"rebound/pkg/peering/bird"
)

// The blackhole budget: for each node, the worst-case time traffic through
// it can be blackholed after a failure, split into what makes it up.
//
//	node dies     peers keep sending to it until they notice: BFD's
//	              detection (interval x multiplier), else the BGP hold time;
//	then          graceful restart: they keep its routes, stale, for its
//	              graceful restart time (BIRD `graceful restart time`,
//	              Calico nodeMeshMaxRestartTime / maxRestartTime);
//	node returns  its BIRD, in graceful-restart recovery, programs and
//	              announces nothing until every configured peer converged
//	              or `graceful restart wait` ends: the whole wait when a
//	              dead peer is configured, unless rebound's agent starts
//	              BIRD with the start rule (docs/peering.md).
//
// The settings are read from BGPSettings (the flags the agents run with);
// whether a node's agent runs is read from its session report.

// BGPSettings are the BGP timers diagnose assumes for the budget; zero
// fields mean the defaults of `rebound agent` (for nodes with an agent)
// and of BIRD/Calico (for nodes without one).
type BGPSettings struct {
	// NoBFD says the agents run with --bfd=false.
	NoBFD bool
	// BFDDetection is --bfd-interval x --bfd-multiplier.
	BFDDetection time.Duration
	// HoldTime is BIRD's BGP hold time (240 s).
	HoldTime time.Duration
	// GracefulRestartTime is the per-peer restart time (120 s).
	GracefulRestartTime time.Duration
	// GracefulRestartWait is BIRD's global wait (240 s).
	GracefulRestartWait time.Duration
}

func (s BGPSettings) withDefaults() BGPSettings {
	if s.BFDDetection == 0 {
		s.BFDDetection = bird.BFD{}.Detection()
	}
	if s.HoldTime == 0 {
		s.HoldTime = bird.DefaultHoldTime * time.Second
	}
	if s.GracefulRestartTime == 0 {
		s.GracefulRestartTime = bird.DefaultGracefulRestartTime * time.Second
	}
	if s.GracefulRestartWait == 0 {
		s.GracefulRestartWait = bird.DefaultGracefulRestartWait * time.Second
	}
	return s
}

// BGPBudget is one node's blackhole budget, in seconds.
type BGPBudget struct {
	Node string `json:"node"`
	// Agent: the node has a PeeringReport with a BGP part (fresh or not:
	// a dead node's agent stops reporting, its BIRD returns with the
	// agent's configuration), so BFD and the start rule apply to it; a
	// gossip-only agent runs beside no BIRD.
	Agent bool `json:"agent"`
	// DetectionSeconds: how long its peers keep sending to it after it
	// dies; DetectedBy is "BFD" or "hold time".
	DetectionSeconds float64 `json:"detectionSeconds"`
	DetectedBy       string  `json:"detectedBy"`
	// GracefulRestartSeconds: then its peers keep its routes this long.
	GracefulRestartSeconds float64 `json:"gracefulRestartSeconds"`
	// WaitSeconds: when it returns, its BIRD waits this long at worst for
	// dead peers before it programs routes; WaitBy says why.
	WaitSeconds float64 `json:"waitSeconds"`
	WaitBy      string  `json:"waitBy"`
	// WorstCaseSeconds is the sum.
	WorstCaseSeconds float64 `json:"worstCaseSeconds"`
	// Shorten names the setting that shortens the largest part.
	Shorten string `json:"shorten"`
}

// bgpBudgets computes every node's budget into BGP.Budgets.
func (e *explainer) bgpBudgets(names []string) {
	s := e.x.BGP.withDefaults()
	b := &e.report.BGP
	b.Budgets = []BGPBudget{}
	agents := map[string]bool{}
	for _, r := range e.bgpReportsOnly() {
		agents[r.Reporter] = true
	}
	for _, name := range names {
		b.Budgets = append(b.Budgets, budgetFor(name, agents[name], s))
	}
}

// budgetFor is the budget of one node, a pure function of the settings.
func budgetFor(node string, agent bool, s BGPSettings) BGPBudget {
	bb := BGPBudget{Node: node, Agent: agent, GracefulRestartSeconds: s.GracefulRestartTime.Seconds()}
	if agent && !s.NoBFD {
		bb.DetectionSeconds, bb.DetectedBy = s.BFDDetection.Seconds(), "BFD"
	} else {
		bb.DetectionSeconds, bb.DetectedBy = s.HoldTime.Seconds(), "hold time"
	}
	if agent {
		// The start rule leaves dead peers out of BIRD's start: it waits
		// for live peers only, seconds.
		bb.WaitSeconds, bb.WaitBy = 0, "start rule (rebound agent): only peers with evidence of life"
	} else {
		bb.WaitSeconds, bb.WaitBy = s.GracefulRestartWait.Seconds(), "graceful restart wait: BIRD waits for every configured peer, dead ones too"
	}
	bb.WorstCaseSeconds = bb.DetectionSeconds + bb.GracefulRestartSeconds + bb.WaitSeconds
	switch largest := max(bb.DetectionSeconds, bb.GracefulRestartSeconds, bb.WaitSeconds); {
	case largest == bb.WaitSeconds:
		bb.Shorten = "run `rebound agent` beside BIRD (and `rebound agent --once` before BIRD starts): BIRD then starts without the dead peers"
	case largest == bb.DetectionSeconds && agent:
		bb.Shorten = "turn BFD on (`rebound agent --bfd`, the default): a dead peer is noticed in --bfd-interval x --bfd-multiplier"
	case largest == bb.DetectionSeconds:
		bb.Shorten = "run `rebound agent` (BFD on by default), or lower BIRD's hold time: a dead peer is noticed only when it runs out"
	default:
		bb.Shorten = "lower the graceful restart time (`rebound agent --graceful-restart-time`, Calico nodeMeshMaxRestartTime): peers keep a dead node's routes that long"
	}
	return bb
}

// budgetLine is the text form of a budget.
func budgetLine(bb BGPBudget) string {
	return fmt.Sprintf("%s: up to %s (detection %s by %s + graceful restart %s + wait %s); shorten: %s",
		bb.Node, secs(bb.WorstCaseSeconds), secs(bb.DetectionSeconds), bb.DetectedBy, secs(bb.GracefulRestartSeconds), secs(bb.WaitSeconds), bb.Shorten)
}

func secs(v float64) string {
	return (time.Duration(v * float64(time.Second))).Round(100 * time.Millisecond).String()
}
