package diagnose

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

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
	ed.Disagreements = []GossipDisagreement{}
	in := liveness.Input{
		Nodes:   kube.LivenessNodes(e.s.Nodes),
		Reports: e.x.PeeringReports,
		Leases:  e.x.Leases,
		Options: e.x.Peering.Evidence,
	}
	c := liveness.CoverageOf(in, e.now)
	e.explainDisagreements(in)
	if !c.InUse {
		ed.Status = "NotInUse"
		ed.Message = "no agent gossips (no PeeringReport has a gossip read): a node is found dead when the API has it NotReady, as upstream"
		e.explainFewRenewing()
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

// explainDisagreements names each node on which the gossip plane
// disagrees with the Lease plane, why, and whether early judgement is
// held for it or cluster-wide: liveness.Assess's own rule over the
// snapshot. diagnose keeps no history, so it says what this snapshot
// holds; the controller holds at least that.
func (e *explainer) explainDisagreements(in liveness.Input) {
	ed := &e.report.EarlyDetection
	a := liveness.Assess(in, e.now)
	if a.Hold.Reason != "" {
		h := a.Hold
		ed.Hold = &h
		e.add(Finding{Impact: ImpactInfo, Kind: "EarlyDetection", Object: "Early detection",
			Cause:   "early judgement is held cluster-wide: " + h.Detail,
			Rebound: fmt.Sprintf("no node is found dead early by its gossip plane until %s at the soonest; the API's NotReady decides, as upstream", h.Until.UTC().Format(time.RFC3339))})
	}
	for _, name := range slices.Sorted(maps.Keys(a.Disagreements)) {
		d := a.Disagreements[name]
		gd := GossipDisagreement{Node: name, Reason: string(d.Reason), Detail: d.Detail}
		f := Finding{Impact: ImpactInfo, Kind: "EarlyDetection", Object: "Node " + name,
			Cause: fmt.Sprintf("the gossip plane disagrees with the Lease plane (%s): %s", d.Reason, d.Detail)}
		switch until, distrusted := a.Distrusted[name]; {
		case a.Hold.Reason != "":
			gd.Held, gd.HeldUntil = "ClusterWide", a.Hold.Until.UTC()
			f.Rebound = "early judgement is held cluster-wide (" + a.Hold.Reason + ")"
		case distrusted:
			gd.Held, gd.HeldUntil = "Node", until.UTC()
			f.Rebound = fmt.Sprintf("its gossip plane is not trusted: it is not found dead early until %s (--gossip-distrust-window after the disagreement ends)", until.UTC().Format(time.RFC3339))
		default:
			f.Rebound = "its member's silence is no vote: nothing is held, and it is not found dead by it"
		}
		ed.Disagreements = append(ed.Disagreements, gd)
		e.add(f)
	}
}

// explainFewRenewing names, when no agent gossips, the shape in which
// only a minority of the nodes' Leases still renew: the workers' path to
// the API servers failing (a load balancer in front of them; a
// control-plane node's kubelet talks to its local API server) and those
// workers dying look the same from the API, and only witnesses that
// reach the API (the agents) tell them apart. Without them rebound acts
// on such nodes' pods after their policies' maxUnavailableTime, as on
// dead ones.
func (e *explainer) explainFewRenewing() {
	if e.x.Leases == nil {
		return
	}
	margin := e.x.Peering.Evidence.LeaseMargin
	var renewing, stale []string
	for _, n := range e.s.Nodes {
		l, ok := e.x.Leases[n.Name]
		at := l.StaleAt(margin)
		if !ok || at.IsZero() {
			continue
		}
		if e.now.After(at) {
			stale = append(stale, n.Name)
		} else {
			renewing = append(renewing, n.Name)
		}
	}
	if len(renewing) == 0 || len(stale) < 2 || 2*len(renewing) >= len(renewing)+len(stale) {
		return
	}
	slices.Sort(renewing)
	slices.Sort(stale)
	e.add(Finding{Impact: ImpactInfo, Kind: "EarlyDetection", Object: "Lease plane",
		Cause: fmt.Sprintf("the Leases of %d of %d nodes are stale (%s) while only %s renew, and no agent gossips: "+
			"a failure of those nodes' path to the API servers (a load balancer in front of them) and the death of those nodes look the same from the API",
			len(stale), len(stale)+len(renewing), listSome(stale, 5), listSome(renewing, 5)),
		Rebound: "without agents rebound cannot tell the two apart: it rescues the critical pods of the stale nodes after their policies' maxUnavailableTime, " +
			"within what the renewing nodes can run, as for dead nodes; run the agents (docs/install.md) so that witnesses that reach the API see live nodes alive and rebound holds"})
}

// listSome joins at most n names and says how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
