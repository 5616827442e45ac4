package diagnose

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
	"rebound/pkg/peering/calico"
	"rebound/pkg/peering/kube"
)

// explainBGP reads the agents' session reports (PeeringReport objects,
// converted by pkg/peering/kube), the published peer set (the label
// peering.rebound.dev/in-set, and the published document for a freeze),
// and explains each membership with the peering planner's own reasons:
// peering.Plan is run on the nodes and reports with the membership the
// labels publish (the flap history lives in the controller's ConfigMap,
// which diagnose does not read).
func (e *explainer) explainBGP() {
	b := &e.report.BGP
	b.Nodes, b.KeptNotReady, b.LeftOut, b.Budgets = []BGPNode{}, []BGPMember{}, []BGPMember{}, []BGPBudget{}
	e.explainCalico()
	names := slices.Sorted(maps.Keys(e.nodes))
	st, managed := e.bgpStatus(names)
	if !managed {
		return
	}
	kept := e.bgpMembers(names, st)
	waitedFor := e.bgpReports(kept)
	for _, name := range slices.Sorted(maps.Keys(kept)) {
		if waitedFor[name] {
			continue
		}
		m := kept[name]
		e.add(Finding{Impact: ImpactInfo, Kind: "BGPKeptNotReady", Object: "Node " + name,
			Cause: fmt.Sprintf("NotReady but still in the BGP peer set (%s: %s): a BIRD that restarts now waits for it in graceful-restart recovery", m.Reason, m.Message),
			Since: m.NotReadySince})
	}
	e.bgpBudgets(names)
}

// explainCalico reports where the Calico BGPPeer goes, as the controller
// publishes it; a controller that could choose no group writes no
// BGPPeer, which is a finding: with Calico's mesh off, calico-node's BIRD
// then peers with no node of the set.
func (e *explainer) explainCalico() {
	c := e.x.Calico
	if c == nil {
		return
	}
	e.report.BGP.Calico = &BGPCalico{APIGroup: c.APIGroup, Reason: c.Reason}
	if c.APIGroup == "" {
		e.add(Finding{Impact: ImpactPending, Kind: "CalicoNoBGPPeer", Object: "Calico BGPPeer " + calico.DefaultPeerName,
			Cause:   "the controller writes no Calico BGPPeer: " + c.Reason,
			Rebound: "the controller retries at every pass; fix its --calico-api-group or install Calico's CRDs (docs/peering-calico.md)"})
	}
}

// bgpStatus says whether rebound's peering is in use (agents report, or
// nodes carry the set's label) and reads the published membership.
func (e *explainer) bgpStatus(names []string) (st peering.State, managed bool) {
	b := &e.report.BGP
	anyReport, anyLabel := len(e.bgpReportsOnly()) > 0, false
	st = peering.State{Nodes: map[string]peering.NodeState{}}
	for _, name := range names {
		switch e.nodes[name].node.Labels[peering.LabelInSet] {
		case "true":
			anyLabel = true
			st.Nodes[name] = peering.NodeState{InSet: true}
		case "false":
			anyLabel = true
			st.Nodes[name] = peering.NodeState{InSet: false}
		}
	}
	switch {
	case anyReport:
		b.Status = "Reported"
	case anyLabel:
		b.Status = "NoReports"
		b.Message = "no agent reports BGP sessions: no PeeringReport with a BGP part (is `rebound agent` running beside BIRD?)" + e.gossipOnlyNote()
	default:
		b.Status = "NotManaged"
		b.Message = fmt.Sprintf("no agent reports BGP sessions, and no node carries the %s label: rebound's BGP peering is not in use", peering.LabelInSet) + e.gossipOnlyNote()
		return st, false
	}
	return st, true
}

// bgpMembers explains each node's membership with the planner's own
// reasons (and a freeze of the published set) and returns the NotReady
// nodes the set still keeps.
func (e *explainer) bgpMembers(names []string, st peering.State) map[string]BGPMember {
	b := &e.report.BGP
	var pnodes []peering.Node
	for _, name := range names {
		pnodes = append(pnodes, kube.PlannerNode(e.nodes[name].node))
	}
	res := peering.Plan(peering.Input{Nodes: pnodes, Reports: e.x.PeeringReports, Leases: e.x.Leases, State: st, Config: e.x.Peering}, e.now)
	if ps := e.x.PeerSet; ps != nil && ps.Frozen {
		b.Frozen, b.FrozenReason = true, ps.FrozenReason
		at := ps.PublishedAt.UTC()
		e.add(Finding{Impact: ImpactPending, Kind: "BGPFrozen", Object: "BGP peer set",
			Cause:   "the published peer set is frozen: nobody leaves it: " + ps.FrozenReason,
			Rebound: "rebound holds the set as upstream would hold evictions; it follows node health again once a node is Ready (full disruption) or fewer members would leave at once",
			Since:   &at})
	} else if res.Frozen {
		b.Frozen, b.FrozenReason = true, res.FrozenReason
	}
	decisions := make(map[string]peering.Decision, len(res.Decisions))
	for _, d := range res.Decisions {
		decisions[d.Name] = d
	}
	kept := map[string]BGPMember{}
	for _, name := range names {
		ni := e.nodes[name]
		label := ni.node.Labels[peering.LabelInSet]
		d := decisions[name]
		m := BGPMember{Node: name, Ready: ni.ready, Reason: string(d.Reason), Message: d.Message}
		if !ni.ready {
			t := ni.since.UTC()
			m.NotReadySince = &t
		}
		switch {
		case label == "false":
			switch {
			case d.InSet:
				m.Message = fmt.Sprintf("labelled out, but the peering planner takes it back (%s): the peering controller re-adds it on its next pass; if this lasts, check that it runs", d.Message)
			case d.Reason == peering.OutNotReady:
				m.Message = fmt.Sprintf("NotReady since %s: left out of the mesh after the prune grace period", stamp(ni.since))
			}
			b.LeftOut = append(b.LeftOut, m)
			e.add(Finding{Impact: ImpactInfo, Kind: "BGPLeftOut", Object: "Node " + name,
				Cause: fmt.Sprintf("left out of the BGP peer set (%s): %s", m.Reason, m.Message), Since: m.NotReadySince})
		case label == "true" && !ni.ready:
			if !d.InSet {
				m.Message = d.Message + ": the peering controller leaves it out on its next pass"
			}
			b.KeptNotReady = append(b.KeptNotReady, m)
			kept[name] = m
		}
	}
	return kept
}

// bgpReports reads every agent's PeeringReport into BGP.Nodes and
// findings; it returns the kept NotReady peers some BIRD waits for.
func (e *explainer) bgpReports(kept map[string]BGPMember) map[string]bool {
	b := &e.report.BGP
	waitedFor := map[string]bool{}
	maxAge := e.x.Peering.Evidence.ReportMaxAge
	for _, r := range e.bgpReportsOnly() {
		ni, known := e.nodes[r.Reporter]
		if !known {
			continue
		}
		bn := BGPNode{Node: r.Reporter, Ready: ni.ready, Waiting: []BGPWait{}, Established: r.Established}
		bn.ReportTime = r.ObservedAt.UTC()
		age := e.now.Sub(r.ObservedAt)
		bn.Stale = age > maxAge || age < -e.x.Peering.Evidence.MaxClockSkew
		bn.Error = r.Error
		for _, ss := range r.Sessions {
			if ss.Established() {
				bn.Established++
				continue
			}
			bn.Waiting = append(bn.Waiting, e.bgpWait(ni, ss, kept))
		}
		b.Nodes = append(b.Nodes, bn)
		e.bgpNodeFindings(bn, kept, waitedFor)
	}
	if len(b.Nodes) > 0 {
		b.Message = fmt.Sprintf("%d node(s) report their BGP sessions", len(b.Nodes)) + e.gossipOnlyNote()
	}
	return waitedFor
}

// bgpReportsOnly are the reports with a BGP part: a gossip-only agent
// (`rebound agent --gossip-only`, the documented install without BIRD)
// writes only the gossip field, and says nothing of BGP sessions.
func (e *explainer) bgpReportsOnly() []peering.Report {
	var out []peering.Report
	for _, r := range e.x.PeeringReports {
		if !r.ObservedAt.IsZero() {
			out = append(out, r)
		}
	}
	return out
}

// gossipOnlyNote counts the gossip-only reports, for the BGP message.
func (e *explainer) gossipOnlyNote() string {
	n := 0
	for _, r := range e.x.PeeringReports {
		if r.ObservedAt.IsZero() && r.Gossip != nil {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d agent(s) report gossip only: `rebound agent --gossip-only`, no BIRD)", n)
}

// bgpWait describes one session of a reporter that is not Established.
func (e *explainer) bgpWait(ni nodeInfo, ss peering.Session, kept map[string]BGPMember) BGPWait {
	pi, known := e.nodes[ss.Peer]
	w := BGPWait{Peer: ss.Peer, State: ss.State, PeerReady: known && pi.ready}
	since := ni.since
	if known {
		w.PeerInSet = pi.node.Labels[peering.LabelInSet]
		if pi.since.After(since) {
			since = pi.since
		}
	}
	w.Since = since.UTC()
	if m, ok := kept[ss.Peer]; ok {
		w.Reason = m.Reason + ": " + m.Message
	}
	return w
}

// bgpNodeFindings turns one agent's report into findings. A NotReady
// node's last report says nothing about now and gives none.
func (e *explainer) bgpNodeFindings(bn BGPNode, kept map[string]BGPMember, waitedFor map[string]bool) {
	obj := "Node " + bn.Node
	switch {
	case !bn.Ready:
		return
	case bn.Stale:
		t := bn.ReportTime
		e.add(Finding{Impact: ImpactInfo, Kind: "BGPReport", Object: obj, Since: &t,
			Cause: fmt.Sprintf("its agent's BGP report is from %s, older than %s: is `rebound agent` running on %s?", stamp(bn.ReportTime), e.x.Peering.Evidence.ReportMaxAge, bn.Node)})
		return
	case bn.Error != "":
		t := bn.ReportTime
		e.add(Finding{Impact: ImpactPending, Kind: "BGPReport", Object: obj, Since: &t,
			Cause: fmt.Sprintf("its agent cannot read BIRD: %s", oneLine(bn.Error))})
		return
	}
	for _, w := range bn.Waiting {
		since := w.Since
		f := Finding{Kind: "BGPPeerWait", Object: obj, Since: &since}
		switch m, isKept := kept[w.Peer]; {
		case isKept:
			waitedFor[w.Peer] = true
			head := fmt.Sprintf("BIRD on %s has no session with %s (%s), which is NotReady since %s but still in the peer set (%s: %s)",
				bn.Node, w.Peer, w.State, stamp(derefTime(m.NotReadySince)), m.Reason, m.Message)
			readySince := e.nodes[bn.Node].since
			if up := e.now.Sub(readySince); up < gracefulRestartWait && !readySince.Before(derefTime(m.NotReadySince)) {
				// The report does not say whether BIRD is in
				// graceful-restart recovery. A node that came back
				// within BIRD's default wait most likely is, and it
				// waits for the peers that died before it came back
				// (a peer it saw up before it died does not hold it).
				f.Impact = ImpactBlocking
				f.Cause = fmt.Sprintf("%s; %s became Ready %s ago, so its BIRD is likely in graceful-restart recovery and programs no routes until %s leaves the set or the graceful-restart wait (%s by default) ends",
					head, bn.Node, short(up), w.Peer, gracefulRestartWait)
			} else {
				f.Impact = ImpactPending
				f.Cause = head + ": a BIRD that restarts now waits for it in graceful-restart recovery"
			}
			f.Rebound = keptAdvice(m)
		case !w.PeerReady:
			f.Impact = ImpactPending
			f.Cause = fmt.Sprintf("BIRD on %s has no session with NotReady %s (%s), which is no longer in the peer set: the agent drops it on its next reload", bn.Node, w.Peer, w.State)
		default:
			f.Impact = ImpactPending
			f.Cause = fmt.Sprintf("BIRD on %s has no session Established yet with Ready peer %s (%s)", bn.Node, w.Peer, w.State)
		}
		e.add(f)
	}
}

// gracefulRestartWait is BIRD's default global `graceful restart wait`:
// how long a BIRD in graceful-restart recovery waits for its peers.
const gracefulRestartWait = bird.DefaultGracefulRestartWait * time.Second

// keptAdvice says what keeps a NotReady node in the set and what to do.
func keptAdvice(m BGPMember) string {
	switch peering.Reason(m.Reason) {
	case peering.InGracePeriod:
		return "the peering controller leaves it out of the set when its prune grace period ends"
	case peering.InKeepLabel:
		return fmt.Sprintf("the label %s=true keeps it in the set: remove the label once the node is confirmed off", peering.LabelKeepInMesh)
	case peering.InDisabled:
		return "peer-set pruning is disabled globally, so dead nodes stay in the mesh"
	case peering.InSessionUp:
		return "it shows evidence of life (a live agent's session with it re-established after it went NotReady or BFD up, a witness that reaches the API reading it alive, or its kubelet renewing its Lease: the member's message says which), so the peering controller keeps it: it still forwards"
	case peering.InFrozen:
		return "the peer set is frozen (full disruption, or too many members leaving at once): nobody leaves until that ends"
	default:
		return "the peering controller leaves it out on its next pass"
	}
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
