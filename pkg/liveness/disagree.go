package liveness

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// When the planes disagree. The gossip plane is worth something only
// while it is independent of the Lease plane and tells the truth about
// hosts. A quorum of watchers that calls a node Dead while rebound watches
// its Lease renew is wrong by construction: the kubelet reached the API
// after they called it dead (forged membership messages, a broken probe
// path, a bug). Such a plane is not trusted for that node for a window
// afterwards, and when it is wrong about many nodes at once it is not
// trusted at all. A node whose own member is missing, or whose watchers
// find its member silent while its host answers, weakens the plane
// without lying: it is recorded, never held.

// DisagreementReason names why the planes disagree about a node.
type DisagreementReason string

// Disagreement reasons (the rebound_gossip_disagreement metric's reason
// label, the GossipPlaneDisagrees Event, diagnose).
const (
	// WatchersSayDead: a quorum of the node's gossip watchers say Dead,
	// in fresh reads, since before a renewal of its Lease that rebound
	// watched.
	WatchersSayDead DisagreementReason = "WatchersSayDead"
	// MemberDown: the node is Ready with its Lease renewing, but its own
	// member's gossip read went stale while other members
	// report, or a watcher finds its member silent while its host
	// answers (GossipMemberDown).
	MemberDown DisagreementReason = "MemberDown"
)

// Disagreement is one node's.
type Disagreement struct {
	Reason DisagreementReason `json:"reason"`
	// Detail says what each plane says, in words.
	Detail string `json:"detail"`
	// SelfSilenced, for WatchersSayDead: no fresh gossip read written
	// after the Dead claims began has the node Alive or its host
	// answering, from any reporter: the node is silent to everyone on
	// the pod network while its kubelet renews (a hardened host
	// firewall, a broken pod network, a root user on it). Its own
	// gossip plane is distrusted, but it does not count toward
	// --gossip-distrust-share: a node that silences itself cannot forge
	// anyone else's death. A forged death is contradicted on the gossip
	// plane itself: the node still answers someone.
	SelfSilenced bool `json:"selfSilenced,omitempty"`
}

// Holds of early judgement (Hold.Reason).
const (
	// HoldRestart: this process has no history of the planes'
	// disagreements from before it started; it holds early judgement
	// for one distrust window from its start (fail open).
	HoldRestart = "Restart"
	// HoldShare: more than Options.GossipDistrustShare of the Ready
	// nodes are distrusted at once: the gossip plane is broken at
	// scale, and no Dead vote of it is trusted.
	HoldShare = "Share"
)

// Hold is a cluster-wide stop of early judgement: while it holds, no
// gossip Dead vote counts for any node (Alive votes still do).
type Hold struct {
	// Reason is HoldRestart or HoldShare; empty when nothing holds.
	Reason string `json:"reason,omitempty"`
	// Until is when it ends as things stand (the window after the start,
	// or the moment enough distrust windows end).
	Until time.Time `json:"until,omitzero"`
	// Distrusted counts the Ready nodes whose gossip plane is
	// distrusted and that count toward the share (not SelfSilenced);
	// SelfSilenced those distrusted that do not; Ready the Ready nodes;
	// Max how many may be distrusted before the cluster-wide stop.
	Distrusted   int `json:"distrusted"`
	SelfSilenced int `json:"selfSilenced,omitempty"`
	Ready        int `json:"ready"`
	Max          int `json:"max"`
	// Detail says why, in words.
	Detail string `json:"detail,omitempty"`
}

// Distrust is the history of the planes' disagreements that one process
// kept (DistrustTracker), for Input.Distrust.
type Distrust struct {
	// Since is when the history starts (the process's start): before
	// Since plus the window nothing is known, and early judgement holds.
	Since time.Time
	// LastSaid maps a node to the last time this process saw a quorum of
	// its watchers say Dead while its Lease renewed (WatchersSayDead).
	LastSaid map[string]time.Time
	// Silent holds the nodes of LastSaid whose last such disagreement was
	// SelfSilenced: distrusted, not counted toward the share.
	Silent map[string]bool
	// DeadSeen maps a Dead watch (DeadVoteKey) to when this process
	// first saw it, on rebound's clock. Dead votes are judged against the
	// Lease plane by it, not by the agents' own clocks: a controller
	// whose clock runs behind the agents' would otherwise move every
	// watcher's death after the renewal that refutes it. Nil: no such
	// record (a one-shot CLI), the agents' clocks are read instead.
	DeadSeen map[string]time.Time
}

// DeadVoteKey names one watcher's Dead watch of one node, in one episode
// (a new Since is a new death).
func DeadVoteKey(watcher string, w Watch) string {
	return watcher + "/" + w.Node + "@" + w.Since.UTC().Format(time.RFC3339Nano)
}

// ReadSeenKey names one gossip read of reporter (its ObservedAt) in
// Distrust.DeadSeen, which keeps when this process first saw each read.
func ReadSeenKey(reporter string, observedAt time.Time) string {
	return "read:" + reporter + "@" + observedAt.UTC().Format(time.RFC3339Nano)
}

// readSeen is when the history first saw reporter's gossip read written at
// observedAt, on rebound's clock: an Alive read is judged against a
// node's loss by it, not by the agent's clock (an agent clock behind
// would date a read after the loss before it). Without a record (a
// one-shot CLI) it is the agent's own time; a read not seen before is
// seen now.
func (d *Distrust) readSeen(reporter string, observedAt, now time.Time) time.Time {
	if d == nil || d.DeadSeen == nil {
		return observedAt
	}
	if at, ok := d.DeadSeen[ReadSeenKey(reporter, observedAt)]; ok {
		return at
	}
	return now
}

// deadSeen is when the history first saw watcher's Dead watch w; ok is
// false without such a record.
func (d *Distrust) deadSeen(watcher string, w Watch, now time.Time) (time.Time, bool) {
	if d == nil || d.DeadSeen == nil {
		return time.Time{}, false
	}
	if at, ok := d.DeadSeen[DeadVoteKey(watcher, w)]; ok {
		return at, true
	}
	// Not seen before this pass: it is seen now.
	return now, true
}

// DistrustTracker keeps the history of WatchersSayDead disagreements
// across passes: feed it every assessment (Observe), and give each pass
// its Distrust. Its history starts with its first use (the first pass of
// a process, or of a new leader), and a process that just started knows
// nothing of what the planes did before: Distrust then holds early
// judgement for one window (fail open). The zero value is ready.
type DistrustTracker struct {
	mu       sync.Mutex
	start    time.Time
	last     map[string]time.Time
	silent   map[string]bool
	deadSeen map[string]time.Time
	// deadPresent is when a pass last saw each watch of deadSeen.
	deadPresent map[string]time.Time
}

// SeeReports records, on rebound's clock, when this process first saw
// each Dead watch in rs, and each gossip read (Distrust.DeadSeen). Call it each pass before
// Assess; several planners may, each with the reports it reads. A watch
// no pass has seen for longer than a report's maximum age is forgotten.
func (t *DistrustTracker) SeeReports(rs []Report, now time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.begin(now)
	for _, r := range rs {
		if r.Gossip == nil {
			continue
		}
		k := ReadSeenKey(r.Reporter, r.Gossip.ObservedAt)
		if _, ok := t.deadSeen[k]; !ok {
			t.deadSeen[k] = now
		}
		t.deadPresent[k] = now
		for _, w := range r.Gossip.Watches {
			if w.State != GossipDead {
				continue
			}
			k := DeadVoteKey(r.Reporter, w)
			if _, ok := t.deadSeen[k]; !ok {
				t.deadSeen[k] = now
			}
			t.deadPresent[k] = now
		}
	}
	for k, at := range t.deadPresent {
		if now.Sub(at) > MaxGossipDistrustWindow {
			delete(t.deadPresent, k)
			delete(t.deadSeen, k)
		}
	}
}

// NewDistrustTracker returns a tracker whose history starts at start.
func NewDistrustTracker(start time.Time) *DistrustTracker {
	return &DistrustTracker{start: start, last: map[string]time.Time{}}
}

func (t *DistrustTracker) begin(now time.Time) {
	if t.start.IsZero() {
		t.start = now
	}
	if t.last == nil {
		t.last = map[string]time.Time{}
	}
	if t.silent == nil {
		t.silent = map[string]bool{}
	}
	if t.deadSeen == nil {
		t.deadSeen, t.deadPresent = map[string]time.Time{}, map[string]time.Time{}
	}
}

// Observe records a's WatchersSayDead disagreements as seen at now, and
// forgets nodes last seen longer ago than MaxGossipDistrustWindow.
func (t *DistrustTracker) Observe(a Assessment, now time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.begin(now)
	for name, d := range a.Disagreements {
		if d.Reason == WatchersSayDead && now.After(t.last[name]) {
			// Once seen forged within its window, a node stays counted as
			// forged: a forger must not turn it into a self-silenced one
			// by the timing of its claims.
			_, known := t.last[name]
			t.last[name], t.silent[name] = now, d.SelfSilenced && (!known || t.silent[name])
		}
	}
	for name, at := range t.last {
		if now.Sub(at) > MaxGossipDistrustWindow {
			delete(t.last, name)
			delete(t.silent, name)
		}
	}
}

// Distrust returns the history for Input.Distrust at now: a copy the
// caller owns. A nil tracker has none (nil: no history kept).
func (t *DistrustTracker) Distrust(now time.Time) *Distrust {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.begin(now)
	return t.copyLocked(t.start)
}

// Peek returns what SeeReports(rs, now) followed by Distrust(now) would,
// and records nothing: a read or Dead watch not seen before counts as
// first seen at now, as SeeReports would record it. For a re-check that
// must judge as a pass would without changing what the passes record.
func (t *DistrustTracker) Peek(rs []Report, now time.Time) *Distrust {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	start := t.start
	if start.IsZero() {
		start = now
	}
	d := t.copyLocked(start)
	see := func(k string) {
		if _, ok := d.DeadSeen[k]; !ok {
			d.DeadSeen[k] = now
		}
	}
	for _, r := range rs {
		if r.Gossip == nil {
			continue
		}
		see(ReadSeenKey(r.Reporter, r.Gossip.ObservedAt))
		for _, w := range r.Gossip.Watches {
			if w.State == GossipDead {
				see(DeadVoteKey(r.Reporter, w))
			}
		}
	}
	return d
}

// copyLocked copies the history, with start as its Since; t.mu is held.
func (t *DistrustTracker) copyLocked(start time.Time) *Distrust {
	d := &Distrust{Since: start, LastSaid: make(map[string]time.Time, len(t.last)), Silent: make(map[string]bool, len(t.silent)), DeadSeen: make(map[string]time.Time, len(t.deadSeen))}
	for n, at := range t.last {
		d.LastSaid[n] = at
	}
	for n, s := range t.silent {
		if s {
			d.Silent[n] = true
		}
	}
	for k, at := range t.deadSeen {
		d.DeadSeen[k] = at
	}
	return d
}

// disagreement applies the rule to one node.
func (p *planes) disagreement(name string) (Disagreement, bool) {
	if len(p.ring) == 0 {
		return Disagreement{}, false
	}
	var v NodeVerdict
	if _, known := p.lease(name, &v); !known || !v.LeaseFresh() {
		// Without a Lease seen renewing, nothing contradicts the gossip.
		return Disagreement{}, false
	}
	renewed := fmt.Sprintf("its Lease renews on rebound's clock (last renewal seen %s)", stamp(v.LeaseRenewSeen))
	// A lie is a quorum saying Dead since before a renewal rebound
	// watched: the kubelet reached the API after they called it dead.
	// Dead votes that came after the last renewal are no lie: a host that
	// dies is voted Dead within seconds, often before its Lease has had
	// time to go stale, and distrusting it then would delay every real
	// death to upstream's grace.
	//
	// A death followed by a return is no lie either: its Lease went
	// stale after the Dead votes began, and renews again while the
	// watchers' last reads still say Dead (they catch up within a report
	// cycle). Only a Dead claim that renewals contradicted while it
	// lasted, with no stale gap in between, is one. A rolling reboot
	// returns every node in turn; distrusting each return would stop
	// early judgement cluster-wide (HoldShare) and hold the next real
	// death of each returned node for the window.
	at := loss{seen: p.deadSeen()}
	if !v.LeaseFirstSight {
		at.renewed = v.LeaseRenewSeen
	}
	lease := p.in.Leases[name]
	at.returned = func(began time.Time) bool { return lease.StaleAfter(began, p.opts.LeaseMargin) }
	g := gossipVotes(name, p.watchers(name), p.gossip, p.voter, nil, at)
	if g.watchers >= 2 && g.refuted >= Quorum(g.watchers) {
		d := Disagreement{Reason: WatchersSayDead, Detail: fmt.Sprintf("%d of its %d gossip watchers (%s) say Dead since before a renewal of its Lease: %s",
			g.refuted, g.watchers, strings.Join(g.refutedVoters, ", "), renewed)}
		if by := p.answering(name); by != "" {
			d.Detail += fmt.Sprintf("; yet %s has it answering since: a forged or broken plane, counted toward --gossip-distrust-share", by)
		} else {
			d.SelfSilenced = true
			d.Detail += "; no reader has it answering since: it is silent to the pod network while its kubelet renews (a host firewall, a broken pod network), distrusted for itself, not counted toward --gossip-distrust-share"
		}
		return d, true
	}
	if n := p.byName[name]; !n.Ready {
		return Disagreement{}, false
	}
	if len(g.memberDown) > 0 {
		return Disagreement{Reason: MemberDown, Detail: fmt.Sprintf("Ready and %s, but its gossip member is silent while its host answers, say %s",
			renewed, strings.Join(g.memberDown, ", "))}, true
	}
	// A read that went stale is a member that stopped; no read at all is
	// a node that never ran one (a node selector on the agents, a node
	// just added): not a disagreement, or its alert would fire for ever.
	if _, fresh := p.gossip[name]; !fresh && p.wentQuiet[name] {
		return Disagreement{Reason: MemberDown, Detail: fmt.Sprintf("Ready and %s, but its gossip member's read went stale while %d others report (is `rebound agent --gossip-only` still running on it?)",
			renewed, len(p.ring))}, true
	}
	return Disagreement{}, false
}

// answering names the first reporter (in reporter order) whose fresh
// gossip read has node Alive or its host answering (MemberDown), or ""
// when none does. Any fresh read counts, however long before the Dead
// claims it was written: a forger controls when its claims begin (a new
// Since is a new claim), and would otherwise renew them just after an
// honest watcher's periodic write to pass for the node's own silence.
// A node that really silences itself is read Dead by its watchers within
// a probe or two: they write on a change.
func (p *planes) answering(node string) string {
	for _, r := range p.ring {
		if w, ok := p.gossip[r].Of(node); ok && (w.State == GossipAlive || w.State == GossipMemberDown) {
			return r
		}
	}
	return ""
}

// distrust applies the history: it fills out's Disagreements and Hold
// and sets p.hold, before any node is judged.
//
// Which distrusted nodes count toward the share (MaxDistrusted). The
// share stops early judgement cluster-wide when the gossip plane lies
// about many nodes: its remaining Dead votes deserve no trust. A node
// whose watchers call it Dead while its Lease renews is distrusted either
// way (its own plane says nothing true of it). It counts toward the
// share only when the plane contradicts itself: some reader has it Alive
// or its host answering after the Dead claims began (a forger, a broken
// probe path, a key split). When every reader finds it silent
// (SelfSilenced) the plane tells the truth about the pod network, and
// the node, which cannot forge anyone else's death, is recorded and held
// for itself only. The node's last disagreement decides.
func (p *planes) distrust(order []string, history *Distrust, out *Assessment) {
	window := p.opts.GossipDistrustWindow
	until := map[string]time.Time{}
	silent := map[string]bool{}
	for _, name := range order {
		d, ok := p.disagreement(name)
		if !ok {
			continue
		}
		out.Disagreements[name] = d
		if d.Reason == WatchersSayDead {
			until[name] = p.now.Add(window)
			silent[name] = d.SelfSilenced
		}
	}
	if history != nil {
		for name, at := range history.LastSaid {
			if _, known := p.byName[name]; !known {
				continue
			}
			u := at.Add(window)
			if !p.now.Before(u) {
				continue
			}
			if _, judged := until[name]; !judged {
				silent[name] = history.Silent[name]
			}
			if u.After(until[name]) {
				until[name] = u
			}
		}
	}
	h := &out.Hold
	var ends []time.Time
	for _, name := range order {
		if p.byName[name].Ready {
			h.Ready++
			u, ok := until[name]
			switch {
			case !ok:
			case silent[name]:
				h.SelfSilenced++
			default:
				ends = append(ends, u)
			}
		}
	}
	h.Distrusted = len(ends)
	h.Max = MaxDistrusted(h.Ready, p.opts.GossipDistrustShare)
	switch {
	case history != nil && p.now.Before(history.Since.Add(window)):
		h.Reason, h.Until = HoldRestart, history.Since.Add(window)
		h.Detail = fmt.Sprintf("rebound has no record of the planes' disagreements from before %s (its start): no node is judged early by its gossip plane until %s (--gossip-distrust-window %s)",
			stamp(history.Since), stamp(h.Until), window)
	case h.Distrusted > h.Max:
		slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
		h.Reason, h.Until = HoldShare, ends[h.Distrusted-h.Max-1]
		h.Detail = fmt.Sprintf("the gossip plane disagreed with the Lease plane about %d of %d Ready nodes within --gossip-distrust-window %s, more than the %d --gossip-distrust-share %g allows: no node is judged early by its gossip plane",
			h.Distrusted, h.Ready, window, h.Max, p.opts.GossipDistrustShare)
	}
	if h.Reason != "" {
		// Look again when it ends: the verdicts may change then.
		p.wakeAt(h.Until.Add(time.Millisecond))
	}
	p.hold = func(name string) (time.Time, string) {
		if h.Reason != "" {
			return h.Until, h.Detail
		}
		if u, ok := until[name]; ok {
			return u, fmt.Sprintf("a quorum of its gossip watchers said Dead while its Lease renewed, within --gossip-distrust-window %s: its gossip plane is not trusted", window)
		}
		return time.Time{}, ""
	}
	for name, u := range until {
		out.Distrusted[name] = u
	}
}

// MaxDistrusted is how many of ready Ready nodes may be distrusted at once
// before early judgement stops cluster-wide: share of them, rounded
// down, and at least one, so that one node's forged or broken plane
// never stops the cluster's early detection, and two do in a small
// cluster.
func MaxDistrusted(ready int, share float64) int {
	return max(1, int(math.Floor(share*float64(ready))))
}
