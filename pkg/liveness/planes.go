package liveness

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"time"
)

// The second and third planes: the node's Lease (the kubelet's path to the
// API) and the gossip between the agents (the node network). Either alone
// is never enough: a stale Lease is also what a cut between one node and
// the API looks like, and a lost probe what a bad link looks like. Both
// together say the node is gone, or so cut off that nothing it runs can
// serve anyone, and they say it seconds after death rather than at the
// end of kube-controller-manager's node grace period.

// MaxWatchers bounds Options.Watchers (and the agents' watch lists).
const MaxWatchers = 7

// Lease is what rebound saw of a node's Lease.
type Lease struct {
	// RenewSeen is when rebound last saw the Lease's renewTime change, on
	// rebound's clock (the moment its watch delivered the change, never
	// the renewTime the kubelet wrote with its own clock). A controller
	// that just started has seen no renewal: it takes its first sight
	// as one, the conservative side.
	RenewSeen time.Time
	// RenewInterval is how often the kubelet renews it: a quarter of
	// spec.leaseDurationSeconds, the kubelet's fixed fraction.
	RenewInterval time.Duration
	// FirstSight: RenewSeen is this process's first sight of the Lease,
	// not a renewal it watched. Staleness counts from it (nothing looks
	// dead before a whole renew interval of watching), but freshness
	// does not: after a restart a Lease is fresh only once it is seen
	// renewing, so that a node cut off with the rest is no target in the
	// moments before its first-sight Lease goes stale.
	FirstSight bool
	// Gaps are the longest gaps between two renewals this process
	// watched, oldest first, each longer than every later one (a
	// suffix maximum: a gap shorter than a later one says nothing the
	// later one does not), at most maxLeaseGaps. LeaseTracker keeps them.
	// They tell a return from a lie: a node that died and came back has
	// a gap longer than the renew interval plus the margin after its
	// death was claimed (StaleAfter); a forged death has none.
	Gaps []LeaseGap
}

// LeaseGap is a time between two renewals rebound watched, on its clock.
type LeaseGap struct{ From, To time.Time }

// maxLeaseGaps bounds Lease.Gaps. Dropping the oldest can only hide a
// gap, which makes a return look like a lie: the side that holds early
// judgement.
const maxLeaseGaps = 8

// addGap records a gap between two watched renewals (Lease.Gaps).
func (l *Lease) addGap(g LeaseGap) {
	d := g.To.Sub(g.From)
	for len(l.Gaps) > 0 {
		last := l.Gaps[len(l.Gaps)-1]
		if last.To.Sub(last.From) > d {
			break
		}
		l.Gaps = l.Gaps[:len(l.Gaps)-1]
	}
	l.Gaps = append(l.Gaps, g)
	if len(l.Gaps) > maxLeaseGaps {
		l.Gaps = slices.Delete(l.Gaps, 0, len(l.Gaps)-maxLeaseGaps)
	}
}

// StaleAfter reports whether, after at, the Lease went stale (no renewal
// for the renew interval plus margin) and was seen renewed again: a gap
// between two watched renewals that ends after at and is longer than that.
// The first gap of Gaps that ends after at is the longest of those.
func (l Lease) StaleAfter(at time.Time, margin time.Duration) bool {
	if l.RenewInterval <= 0 {
		return false
	}
	for _, g := range l.Gaps {
		if g.To.After(at) {
			return g.To.Sub(g.From) > l.RenewInterval+margin
		}
	}
	return false
}

// StaleAt is when the Lease plane calls the node gone if no renewal is
// seen before: the renew interval plus the margin after the last one
// rebound saw. Zero when the Lease says nothing (no renewal seen, or no
// interval).
func (l Lease) StaleAt(margin time.Duration) time.Time {
	if l.RenewSeen.IsZero() || l.RenewInterval <= 0 {
		return time.Time{}
	}
	return l.RenewSeen.Add(l.RenewInterval + margin)
}

// Watchers returns the k members that watch node: the k that follow it on
// a hash ring of members (node itself is always placed on the ring, so a
// dead member's watchers are the same whether or not a view still holds
// it). The agents and the controller compute it alike; a member whose
// view differs votes where the controller does not listen, which only
// withholds a vote. The hash spreads neighbours in name order (node-1,
// node-2) apart, so that one rack's or one zone's nodes do not watch each
// other only.
func Watchers(node string, members []string, k int) []string {
	ring := sortedRing(node, members)
	at := slices.Index(ring, node)
	if k > len(ring)-1 {
		k = len(ring) - 1
	}
	out := make([]string, 0, max(k, 0))
	for i := 1; i <= k; i++ {
		out = append(out, ring[(at+i)%len(ring)])
	}
	return out
}

// Watched returns the members self watches, sorted: those whose Watchers
// include self, which are the k members before it on the ring.
// O(members log members).
func Watched(self string, members []string, k int) []string {
	ring := sortedRing(self, members)
	at := slices.Index(ring, self)
	k = min(k, len(ring)-1)
	out := make([]string, 0, max(k, 0))
	for i := 1; i <= k; i++ {
		out = append(out, ring[(at-i+len(ring))%len(ring)])
	}
	slices.Sort(out)
	return out
}

// sortedRing is members and node in ring order, each once.
func sortedRing(node string, members []string) []string {
	ring := make([]string, 0, len(members)+1)
	ring = append(ring, node)
	ring = append(ring, members...)
	slices.SortFunc(ring, func(a, b string) int {
		if c := cmp.Compare(ringHash(a), ringHash(b)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return slices.Compact(ring)
}

// ringHash places a name on the ring. FNV-1a alone ends with the last
// byte, so names that differ only in their last character (node-11,
// node-12; rack-mates) land close together and watch each other: a
// rack's death would never be judged early. A 64-bit finalizer
// (splitmix64's) mixes every input bit into every output bit.
func ringHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// gossipPlane is one node's gossip votes: its watchers (on the ring of the
// fresh gossip reporters), how many say dead, and the first that says
// alive.
type gossipPlane struct {
	watchers   int
	down, up   int
	alive      string // the first watcher that says Alive, in words
	downVoters []string
	// memberDown names the watchers whose host probe answered while the
	// member did not (GossipMemberDown): no vote, but the plane is not
	// whole.
	memberDown []string
	// before counts the reads that abstain because they were read before
	// the node's loss; refuted the Dead votes whose death began before a
	// Lease renewal rebound watched since.
	before, refuted int
	refutedVoters   []string
	refutedFrom     time.Time // the earliest refuted vote's death
	// returned counts the Dead votes of a death its Lease then confirmed
	// (stale after it began) before renewing again: a return.
	returned int
	// witnesses counts the Alive reads, after the loss, of reporters
	// that are not its ring watchers but reach the API (witness).
	witnesses int
}

// seenAlive: a ring watcher or a witness has the node alive, after its
// loss: first-hand life, and a veto of its death.
func (g gossipPlane) seenAlive() bool { return g.up+g.witnesses > 0 }

func (g gossipPlane) dead() bool {
	return g.watchers >= 2 && !g.seenAlive() && g.down >= Quorum(g.watchers)
}

// loss is the moment a node's votes are judged against: a read before it
// abstains, as a BGP report read before a NotReady transition does. Zero
// means every fresh read counts.
type loss struct {
	// dead: a Dead vote counts only from a read after it.
	dead time.Time
	// alive: an Alive vote counts only from a read after it. A watcher
	// that died with the node (a rack) wrote Alive last before the
	// death; that read must not keep the node CutOffFromAPI until it
	// ages out.
	alive time.Time
	// seen, when set, says when this process first saw a Dead watch on
	// its own clock (Distrust.DeadSeen): a Dead vote is then judged by
	// it, not by the agent's ObservedAt and Since.
	seen func(watcher string, w Watch) (time.Time, bool)
	// renewed: a Lease renewal rebound watched at this moment (never a
	// first sight). A Dead vote whose death began before it is refuted:
	// the kubelet reached the API after the watcher called the node
	// dead, so whatever the watcher probed was not the node's host (a
	// forged address), or its probes lie.
	renewed time.Time
	// returned, when set, says whether the Lease went stale after a
	// death began and renewed since (Lease.StaleAfter): such a Dead vote
	// is a death followed by a return, not refuted, and no lie.
	returned func(began time.Time) bool
}

// gossipVotes tallies node's watchers. ring holds the reporters with a
// fresh gossip read. A death vote counts only from a voter (Ready in the
// API, its own Lease not stale): a watcher in doubt itself abstains, and
// an abstention counts against the quorum, like a silent watcher. A
// watcher that has the node alive is heard whatever its own state: a
// liar can only keep a node in, upstream's behaviour, and when the
// control plane fails every Lease goes stale while gossip still sees
// everyone alive. MemberDown is no vote either way (the node's host
// answers, rebound's member on it does not). Reads from before the
// node's loss abstain (loss).
//
// Witnesses beyond the ring: in a partition most of a node's ring
// watchers are cut off with it, and their reads predate the loss. An
// Alive read, after the loss, by any other reporter that reaches the API
// (witnesses: Ready, its own Lease seen renewing) is first-hand life too:
// it vetoes a death and makes the node CutOffFromAPI, as a ring watcher's
// does. Only Alive reads count from them: a death still needs a quorum of
// the ring watchers, so a node that probes everyone cannot vote anyone
// out.
func gossipVotes(node string, ws []string, gossip map[string]*GossipReport, voter func(string) bool, witnesses []aliveRead, at loss) gossipPlane {
	g := gossipPlane{watchers: len(ws)}
	for _, w := range ws {
		watch, ok := gossip[w].Of(node)
		if !ok {
			continue
		}
		read := gossip[w].ObservedAt
		switch watch.State {
		case GossipDead:
			if !voter(w) {
				continue
			}
			began := watch.Since
			if at.seen != nil {
				if seen, ok := at.seen(w, watch); ok {
					read, began = seen, seen
				}
			}
			if !at.dead.IsZero() && !read.After(at.dead) {
				g.before++
				continue
			}
			if !at.renewed.IsZero() && !began.IsZero() && began.Before(at.renewed) {
				if at.returned != nil && at.returned(began) {
					g.returned++
					continue
				}
				g.refuted++
				g.refutedVoters = append(g.refutedVoters, w)
				if g.refutedFrom.IsZero() || began.Before(g.refutedFrom) {
					g.refutedFrom = began
				}
				continue
			}
			g.down++
			g.downVoters = append(g.downVoters, w)
		case GossipAlive:
			if !at.alive.IsZero() && !read.After(at.alive) {
				g.before++
				continue
			}
			g.up++
			if g.alive == "" {
				g.alive = fmt.Sprintf("%s, one of its %d gossip watchers, has it Alive since %s", w, len(ws), stamp(watch.Since))
			}
		case GossipMemberDown:
			g.memberDown = append(g.memberDown, w)
		}
	}
	for _, r := range witnesses {
		if r.by == node || slices.Contains(ws, r.by) || (!at.alive.IsZero() && !r.read.After(at.alive)) {
			continue
		}
		g.witnesses++
		if g.alive == "" {
			g.alive = fmt.Sprintf("%s, a witness that reaches the API (Ready, its Lease renewing) though not one of its %d gossip watchers, has it Alive since %s", r.by, len(ws), stamp(r.since))
		}
	}
	return g
}

// aliveRead is a fresh Alive watch of a node by a reporter that reaches
// the API (planes.witnesses).
type aliveRead struct {
	by          string
	read, since time.Time
}

func (g gossipPlane) String() string {
	s := fmt.Sprintf("%d of its %d gossip watchers say dead, %d alive", g.down, g.watchers, g.up)
	if g.witnesses > 0 {
		s += fmt.Sprintf(", %d other witnesses alive", g.witnesses)
	}
	if g.before > 0 {
		s += fmt.Sprintf(", %d read before it was lost (abstain)", g.before)
	}
	if g.refuted > 0 {
		s += fmt.Sprintf(", %d say dead since before a Lease renewal rebound saw (refuted)", g.refuted)
	}
	return s
}

// planes holds what one Assess reads of the Lease and gossip planes.
type planes struct {
	in     Input
	byName map[string]Node
	now    time.Time
	opts   Options
	gossip map[string]*GossipReport // fresh gossip reads, by reporter
	ring   []string                 // their reporters
	// wentQuiet are the reporters whose gossip read is there but no
	// longer fresh: a member that reported once and stopped. A node that
	// never ran a member (an agent node selector, a node just added) has
	// no read at all and is not among them.
	wentQuiet map[string]bool
	sorted    ringOrder // ring in ring order, for watchers
	// witnessed maps a node to the fresh Alive reads of it by reporters
	// that reach the API (witnesses), in reporter order: built once, so
	// that judging every node costs O(watches), not O(nodes x reports).
	witnessed map[string][]aliveRead
	// hold, when set, says until when and why a node's gossip Dead votes
	// are not counted (the distrust window, the cluster-wide stop).
	hold func(name string) (until time.Time, why string)
	// staleAt is the earliest time the answer may change with no new
	// input: a gossip read that counts ages out, or the Lease of a node
	// that watchers say is dead goes stale.
	staleAt time.Time
}

func (p *planes) wakeAt(t time.Time) {
	if t.After(p.now) && (p.staleAt.IsZero() || t.Before(p.staleAt)) {
		p.staleAt = t
	}
}

func newPlanes(in Input, byName map[string]Node, now time.Time, opts Options) *planes {
	p := &planes{in: in, byName: byName, now: now, opts: opts, gossip: map[string]*GossipReport{}, wentQuiet: map[string]bool{}}
	for _, r := range in.Reports {
		if _, known := byName[r.Reporter]; !known || r.Gossip == nil {
			continue
		}
		if !freshAt(r.Gossip.ObservedAt, now, opts) {
			p.wentQuiet[r.Reporter] = true
			continue
		}
		if _, dup := p.gossip[r.Reporter]; dup {
			continue
		}
		p.gossip[r.Reporter] = r.Gossip
		delete(p.wentQuiet, r.Reporter)
		p.ring = append(p.ring, r.Reporter)
		p.wakeAt(r.Gossip.ObservedAt.Add(opts.ReportMaxAge).Add(time.Millisecond))
	}
	slices.Sort(p.ring)
	p.sorted = newRingOrder(p.ring)
	// Only a node that can be lost needs witnesses: NotReady, or its
	// Lease not fresh (a Ready node whose Lease renews is judged by
	// nothing early).
	p.witnessed = map[string][]aliveRead{}
	for name, n := range byName {
		var v NodeVerdict
		if _, known := p.lease(name, &v); !n.Ready || (known && v.LeaseStale) {
			p.witnessed[name] = nil
		}
	}
	if len(p.witnessed) == 0 {
		return p
	}
	for _, r := range p.ring {
		if !p.reachesAPI(r) {
			continue
		}
		g := p.gossip[r]
		for _, w := range g.Watches {
			if reads, lost := p.witnessed[w.Node]; lost && w.State == GossipAlive {
				p.witnessed[w.Node] = append(reads, aliveRead{by: r, read: g.ObservedAt, since: w.Since})
			}
		}
	}
	return p
}

// reachesAPI: a witness is Ready in the API and rebound watched its own
// Lease renew (LeaseFresh: never a first sight), so its agent's read is
// as current as the API's own view of it.
func (p *planes) reachesAPI(name string) bool {
	n, ok := p.byName[name]
	if !ok || !n.Ready {
		return false
	}
	var v NodeVerdict
	_, _ = p.lease(name, &v)
	return v.LeaseFresh()
}

// watchers is Watchers(name, p.ring, k), from the ring sorted once.
func (p *planes) watchers(name string) []string { return p.sorted.watchers(name, p.opts.Watchers) }

// ringOrder is a ring of members sorted once, so that each node's watchers
// cost O(k + log n), not the O(n log n) of Watchers: Assess asks for every
// node's, more than once.
type ringOrder struct {
	names  []string
	hashes []uint64
	at     map[string]int
}

func newRingOrder(members []string) ringOrder {
	var r ringOrder
	if len(members) == 0 {
		return r
	}
	r.names = sortedRing(members[0], members)
	r.hashes = make([]uint64, len(r.names))
	r.at = make(map[string]int, len(r.names))
	for i, n := range r.names {
		r.hashes[i], r.at[n] = ringHash(n), i
	}
	return r
}

// watchers returns what Watchers(node, members, k) does: the k members
// that follow node on the ring, node placed on it if it is not a member.
func (r ringOrder) watchers(node string, k int) []string {
	n := len(r.names)
	i, member := r.at[node]
	if !member {
		h := ringHash(node)
		// node's place among the members: the first that sorts after it.
		i = sort.Search(n, func(j int) bool { return r.hashes[j] > h || (r.hashes[j] == h && r.names[j] > node) }) - 1
		k = min(k, n)
	} else {
		k = min(k, n-1)
	}
	out := make([]string, 0, max(k, 0))
	for j := 1; j <= k; j++ {
		out = append(out, r.names[((i+j)%n+n)%n])
	}
	return out
}

// lease fills the Lease plane of v; known is false without one.
func (p *planes) lease(name string, v *NodeVerdict) (staleAt time.Time, known bool) {
	l, ok := p.in.Leases[name]
	if !ok {
		return time.Time{}, false
	}
	staleAt = l.StaleAt(p.opts.LeaseMargin)
	if staleAt.IsZero() {
		return time.Time{}, false
	}
	v.LeaseRenewSeen, v.LeaseStaleAt, v.LeaseFirstSight = l.RenewSeen, staleAt, l.FirstSight
	// Stale from the moment itself: a clock started then must not find
	// the Lease still fresh.
	v.LeaseStale = !p.now.Before(staleAt)
	return staleAt, true
}

// voter: a gossip watcher's vote counts only while it is Ready in the API
// and its own Lease is not stale; a watcher that is itself in doubt
// abstains.
func (p *planes) voter(name string) bool {
	n, ok := p.byName[name]
	if !ok || !n.Ready {
		return false
	}
	var v NodeVerdict
	_, _ = p.lease(name, &v)
	return !v.LeaseStale
}

func (p *planes) votes(name string, v *NodeVerdict, at loss) gossipPlane {
	if len(p.ring) == 0 {
		return gossipPlane{}
	}
	g := gossipVotes(name, p.watchers(name), p.gossip, p.voter, p.witnessed[name], at)
	v.GossipWatchers, v.GossipDown, v.GossipUp, v.GossipWitnesses = g.watchers, g.down, g.up, g.witnesses
	return g
}

// lossOf is the moment node's gossip votes are judged against: with its
// Lease stale on rebound's clock, the last renewal rebound saw (an Alive
// vote only from after the renewal that did not come was due: before
// then the node may still have been alive); else, for a NotReady node,
// its NotReady transition on rebound's clock; else none (a Ready node
// whose Lease renews is judged by nothing early).
func (p *planes) lossOf(name string, v NodeVerdict) loss {
	if !v.LeaseStaleAt.IsZero() && v.LeaseStale {
		at := loss{dead: v.LeaseRenewSeen, alive: v.LeaseRenewSeen.Add(p.in.Leases[name].RenewInterval), seen: p.deadSeen()}
		if !v.LeaseFirstSight {
			at.renewed = v.LeaseRenewSeen
		}
		return at
	}
	if n, ok := p.byName[name]; ok && !n.Ready {
		at := loss{dead: v.Since, alive: v.Since, seen: p.deadSeen()}
		if !v.LeaseStaleAt.IsZero() && !v.LeaseFirstSight {
			at.renewed = v.LeaseRenewSeen
		}
		return at
	}
	return loss{}
}

// deadSeen times Dead votes on rebound's clock when the caller keeps the
// record (Distrust.DeadSeen), nil otherwise.
func (p *planes) deadSeen() func(string, Watch) (time.Time, bool) {
	d := p.in.Distrust
	if d == nil || d.DeadSeen == nil {
		return nil
	}
	return func(watcher string, w Watch) (time.Time, bool) { return d.deadSeen(watcher, w, p.now) }
}

// held says whether node's gossip plane may not make it Dead now, until
// when and why (Assessment.Hold, Distrust): its Dead votes are then not
// counted, its Alive votes still are (they can only keep a node in).
func (p *planes) held(name string) (time.Time, string) {
	if p.hold == nil {
		return time.Time{}, ""
	}
	return p.hold(name)
}

// judgeReady: a node the API has Ready is Dead early only when both planes
// say so; its Lease stale while a watcher has it alive is CutOffFromAPI
// (no early action); anything else leaves it Alive, upstream's view.
func (p *planes) judgeReady(name string, v NodeVerdict) NodeVerdict {
	staleAt, known := p.lease(name, &v)
	g := p.votes(name, &v, p.lossOf(name, v))
	if known && !v.LeaseStale && g.down > 0 {
		// Watchers already say dead: look again the moment the Lease
		// goes stale, rather than at the next event.
		p.wakeAt(staleAt.Add(time.Millisecond))
	}
	if !known || !v.LeaseStale {
		return v
	}
	age := p.now.Sub(v.LeaseRenewSeen).Round(100 * time.Millisecond)
	switch {
	case g.seenAlive():
		v.Verdict, v.Veto = CutOffFromAPI, g.alive
		v.Reason = fmt.Sprintf("Ready in the API, its Lease not renewed for %s on rebound's clock, but alive: %s", age, g.alive)
	case g.dead() && v.LeaseFirstSight:
		// This process has not watched the Lease renew once: no renewal
		// can refute the votes, so a plane the last leader distrusted
		// would be believed. Upstream's NotReady decides.
		v.Reason = fmt.Sprintf("Ready in the API; its Lease not renewed for %s on rebound's clock and %s (%v), but rebound has not watched its Lease renew since it started (a first sight refutes nothing): not judged early", age, g, g.downVoters)
	case g.dead():
		if until, why := p.held(name); why != "" {
			p.wakeAt(until.Add(time.Millisecond))
			v.HeldUntil = until
			v.Reason = fmt.Sprintf("Ready in the API; its Lease not renewed for %s on rebound's clock and %s (%v), but not judged early until %s: %s", age, g, g.downVoters, stamp(until), why)
			return v
		}
		v.Verdict, v.Early, v.DetectedAt, v.DownSince = Dead, true, staleAt, staleAt
		v.Reason = fmt.Sprintf("Ready in the API, but dead on both planes: its Lease not renewed for %s on rebound's clock (stale since %s), and %s (%v), none alive", age, stamp(staleAt), g, g.downVoters)
	default:
		v.Reason = fmt.Sprintf("Ready in the API; its Lease not renewed for %s on rebound's clock, but the gossip plane does not corroborate: %s", age, g)
		if g.watchers < 2 {
			v.Reason = fmt.Sprintf("Ready in the API; its Lease not renewed for %s on rebound's clock, but it has %d gossip watchers, fewer than the two a death needs", age, g.watchers)
		}
	}
	return v
}

// judgeNotReady adds the Lease and gossip planes to the API and BGP
// verdict v: a watcher with the node alive is first-hand life; a quorum
// of its watchers dead, with its Lease stale on rebound's clock, is death
// (as good as a BGP quorum, and it needs no BGP: BIRD without BFD has
// none to give). Gossip without the Lease plane is never death: it is one
// plane, and any node holding the gossip key can forge it; nor while the
// Lease renews: the kubelet still reaches the API.
func (p *planes) judgeNotReady(name string, v NodeVerdict) NodeVerdict {
	staleAt, known := p.lease(name, &v)
	g := p.votes(name, &v, p.lossOf(name, v))
	switch {
	case v.Verdict == CutOffFromAPI:
	case g.seenAlive():
		v.Verdict, v.DownSince = CutOffFromAPI, time.Time{}
		if v.Veto == "" {
			v.Veto = g.alive
		}
		v.Reason = fmt.Sprintf("NotReady since %s, but alive: %s", stamp(v.Since), g.alive)
	case v.Veto != "":
	case !g.dead():
	case !known:
		v.Reason += fmt.Sprintf("; %s, but it has no Lease plane to corroborate, and gossip alone is one plane", g)
	case !v.LeaseStale:
		// Look again the moment the Lease goes stale.
		p.wakeAt(staleAt.Add(time.Millisecond))
		v.Reason += fmt.Sprintf("; %s, but its Lease renewing on rebound's clock does not corroborate", g)
	default:
		if until, why := p.held(name); why != "" {
			p.wakeAt(until.Add(time.Millisecond))
			v.HeldUntil = until
			v.Reason += fmt.Sprintf("; %s, its Lease stale, but its gossip plane is not trusted until %s: %s", g, stamp(until), why)
			break
		}
		if v.Verdict != Dead {
			v.Verdict, v.DownSince = Dead, v.Since
			v.Reason = fmt.Sprintf("NotReady since %s, and %s (%v), none alive, and its Lease stale on rebound's clock", stamp(v.Since), g, g.downVoters)
		} else {
			v.Reason += fmt.Sprintf("; gossip and the Lease plane agree: %s", g)
		}
		v.DetectedAt = staleAt
		if staleAt.Before(v.DownSince) {
			v.DownSince = staleAt
			v.Reason += fmt.Sprintf("; its Lease went stale at %s on rebound's clock", stamp(staleAt))
		}
	}
	return v
}

func freshAt(at, now time.Time, opts Options) bool {
	if at.IsZero() {
		return false
	}
	age := now.Sub(at)
	return age <= opts.ReportMaxAge && age >= -opts.MaxClockSkew
}
