package liveness

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Early detection's coverage: for each node the API has Ready, whether
// Assess could find it Dead early (both planes) if it died now, and if
// not, why. It reads the same Input with the same rules as Assess (the
// ring of fresh gossip reads, Watchers, the voters, the Lease plane), so
// that what diagnose says of a node is what the verdicts would do.
// Nothing decides on it.

// CoverageMode is how a Ready node's early detection stands.
type CoverageMode string

const (
	// CoverageOn: its Lease is timed, it has at least two gossip
	// watchers, and a quorum of them list it and may vote.
	CoverageOn CoverageMode = "On"
	// CoverageOff: it cannot be found dead early as things stand; the
	// API's NotReady, at the end of the node grace period, comes first.
	CoverageOff CoverageMode = "Off"
	// CoverageLeaseOnly: a quorum of its watchers already has it Dead
	// while its Lease renews (forged membership, a broken probe path):
	// the gossip plane has nothing more to say. The planes disagree
	// (WatchersSayDead), so its gossip plane is held for the distrust
	// window: a stale Lease does not make it Dead early.
	CoverageLeaseOnly CoverageMode = "LeaseOnly"
)

// Own gossip read states (NodeCoverage.OwnGossip).
const (
	OwnGossipFresh   = "fresh"
	OwnGossipStale   = "stale"
	OwnGossipMissing = "missing"
)

// NodeCoverage is one Ready node's early-detection coverage.
type NodeCoverage struct {
	Mode CoverageMode
	// Watchers are its watchers on the ring of fresh gossip reads;
	// Voters how many of them list it and may vote on its death (Ready,
	// their own Lease not stale); Quorum how many Dead votes a death
	// needs.
	Watchers, Voters, Quorum int
	// OwnGossip is the state of its own agent's gossip read (fresh,
	// stale, missing); OwnGossipAt when that read was written (zero when
	// missing).
	OwnGossip   string
	OwnGossipAt time.Time
	// Reason says why, in words; empty when On.
	Reason string
}

// Coverage is early detection's coverage of the cluster.
type Coverage struct {
	// InUse: some agent wrote a gossip read, fresh or not. Without one,
	// no node is ever found dead early, by design: Nodes is empty.
	InUse bool
	// Off, when set, says why no node can be found dead early (no fresh
	// gossip read, no Lease plane); Nodes is then empty.
	Off string
	// Ring counts the fresh gossip reads; Stale names the agents whose
	// gossip read is too old (or too far ahead) to count.
	Ring  int
	Stale []string
	// Nodes has every node the API has Ready, by name.
	Nodes map[string]NodeCoverage
}

// CoverageOf computes the coverage of every node in.Nodes has Ready, at
// now.
func CoverageOf(in Input, now time.Time) Coverage {
	opts := in.Options.WithDefaults()
	byName := make(map[string]Node, len(in.Nodes))
	for _, n := range in.Nodes {
		if _, dup := byName[n.Name]; !dup {
			byName[n.Name] = n
		}
	}
	own := map[string]*GossipReport{}
	for _, r := range in.Reports {
		if _, known := byName[r.Reporter]; !known || r.Gossip == nil {
			continue
		}
		if _, dup := own[r.Reporter]; !dup {
			own[r.Reporter] = r.Gossip
		}
	}
	c := Coverage{InUse: len(own) > 0, Nodes: map[string]NodeCoverage{}}
	if !c.InUse {
		return c
	}
	p := newPlanes(in, byName, now, opts)
	c.Ring = len(p.ring)
	for name := range own {
		if _, fresh := p.gossip[name]; !fresh {
			c.Stale = append(c.Stale, name)
		}
	}
	slices.Sort(c.Stale)
	switch {
	case len(p.ring) == 0:
		c.Off = fmt.Sprintf("no agent's gossip read is fresh (%d written, all older than %s or too far ahead): no node has a gossip watcher",
			len(own), opts.ReportMaxAge)
		return c
	case in.Leases == nil:
		c.Off = "no Lease plane: the nodes' Leases were not read"
		return c
	}
	for name, n := range byName {
		if n.Ready {
			c.Nodes[name] = p.coverage(name, own[name])
		}
	}
	return c
}

// coverage is one Ready node's coverage; g is its own agent's gossip
// read, nil when it has none.
func (p *planes) coverage(name string, g *GossipReport) NodeCoverage {
	ws := p.watchers(name)
	nc := NodeCoverage{Mode: CoverageOn, Watchers: len(ws), Quorum: Quorum(len(ws)), OwnGossip: OwnGossipMissing}
	var selfNote string
	switch {
	case g == nil:
		selfNote = "no gossip report from its member (is `rebound agent --gossip-only` running on it?)"
	case p.gossip[name] == nil:
		nc.OwnGossip, nc.OwnGossipAt = OwnGossipStale, g.ObservedAt
		selfNote = fmt.Sprintf("its member's gossip report is stale (written at %s)", stamp(g.ObservedAt))
	default:
		nc.OwnGossip, nc.OwnGossipAt = OwnGossipFresh, g.ObservedAt
	}
	var silent, abstain []string
	for _, w := range ws {
		_, listed := p.gossip[w].Of(name)
		switch {
		case !listed:
			silent = append(silent, w)
		case !p.voter(w):
			abstain = append(abstain, w)
		default:
			nc.Voters++
		}
	}
	var v NodeVerdict
	_, leaseKnown := p.lease(name, &v)
	gv := gossipVotes(name, ws, p.gossip, p.voter, nil, loss{})
	var why []string
	if !leaseKnown {
		why = append(why, "no Lease renewal of it to time: the Lease plane says nothing of it")
	}
	switch {
	case len(ws) < 2:
		why = append(why, fmt.Sprintf("fewer than two gossip watchers (%d, on a ring of %d fresh gossip reads): a death needs two", len(ws), len(p.ring)))
	case nc.Voters < nc.Quorum:
		s := fmt.Sprintf("only %d of its %d gossip watchers can vote on it, short of the quorum of %d", nc.Voters, len(ws), nc.Quorum)
		if len(silent) > 0 {
			s += fmt.Sprintf(": %s do not list it", strings.Join(silent, ", "))
		}
		if len(abstain) > 0 {
			sep := ": "
			if len(silent) > 0 {
				sep = "; "
			}
			s += fmt.Sprintf("%s%s abstain (NotReady, or their own Lease is stale)", sep, strings.Join(abstain, ", "))
		}
		why = append(why, s)
	}
	switch {
	case len(why) > 0:
		nc.Mode = CoverageOff
	case gv.dead() && !v.LeaseStale:
		nc.Mode = CoverageLeaseOnly
		why = append(why, fmt.Sprintf("%s while its Lease renews: the planes disagree (WatchersSayDead), so its gossip plane is not trusted while they do and for the distrust window after, and a death of it now waits for the API's NotReady", gv))
	}
	if nc.Mode != CoverageOn {
		if selfNote != "" {
			why = append([]string{selfNote}, why...)
		}
		nc.Reason = strings.Join(why, "; ")
	}
	return nc
}
