package diagnose

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"rebound/pkg/liveness"
	"rebound/pkg/peering/kube"
)

// explainEarlyDetection says which nodes the API has Ready could not be
// found dead early, on both planes, and why: pkg/liveness's coverage of
// the same reports and Leases the verdicts were judged from, so that
// diagnose restates no rule of the model. Nothing is said when no agent
// gossips: early detection is then off by design.
func (e *explainer) explainEarlyDetection() {
	ed := &e.report.EarlyDetection
	ed.Nodes = []EarlyDetectionNode{}
	c := liveness.CoverageOf(liveness.Input{
		Nodes:   kube.LivenessNodes(e.s.Nodes),
		Reports: e.x.PeeringReports,
		Leases:  e.x.Leases,
		Options: e.x.Peering.Evidence,
	}, e.now)
	if !c.InUse {
		ed.Status = "NotInUse"
		ed.Message = "no agent gossips (no PeeringReport has a gossip read): a node is found dead when the API has it NotReady, as upstream"
		return
	}
	stale := ""
	if len(c.Stale) > 0 {
		stale = fmt.Sprintf("; stale gossip reads from %s", strings.Join(c.Stale, ", "))
	}
	if c.Off != "" {
		ed.Status = "Off"
		ed.Message = "early detection is off for every node: " + c.Off + stale
		e.add(Finding{Impact: ImpactInfo, Kind: "EarlyDetection", Object: "Early detection",
			Cause:   ed.Message,
			Rebound: "no node is found dead before the API has it NotReady; nothing early is marked or rescued"})
		return
	}
	for _, name := range slices.Sorted(maps.Keys(c.Nodes)) {
		nc := c.Nodes[name]
		if nc.Mode == liveness.CoverageOn {
			continue
		}
		n := EarlyDetectionNode{Node: name, Mode: string(nc.Mode), Watchers: nc.Watchers, Voters: nc.Voters, Quorum: nc.Quorum,
			OwnGossip: nc.OwnGossip, OwnGossipAt: nc.OwnGossipAt.UTC(), Reason: nc.Reason}
		ed.Nodes = append(ed.Nodes, n)
		f := Finding{Impact: ImpactInfo, Kind: "EarlyDetection", Object: "Node " + name}
		switch nc.Mode {
		case liveness.CoverageLeaseOnly:
			f.Cause = "early detection rests on its Lease alone: " + nc.Reason
		default:
			f.Cause = "early detection is off for it: " + nc.Reason
			f.Rebound = "it is found dead only when the API has it NotReady, as upstream"
		}
		e.add(f)
	}
	switch {
	case len(ed.Nodes) == 0:
		ed.Status = "On"
		ed.Message = fmt.Sprintf("every Ready node can be found dead early (%d fresh gossip reads)%s", c.Ring, stale)
	default:
		ed.Status = "Partial"
		ed.Message = fmt.Sprintf("%d of %d Ready nodes cannot be found dead early on both planes (%d fresh gossip reads)%s", len(ed.Nodes), len(c.Nodes), c.Ring, stale)
	}
}
