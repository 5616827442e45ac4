package gossip

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// AddressBook is what the control plane holds for each node: where its
// gossip member listens (its pod's EndpointSlice entry) and where its host
// answers (the Node's address and its kubelet's port). The agent reads it
// from the API (internal/agent), never from the gossip: an address relayed
// through the membership is only what some key holder said.
//
// It decides two things. memberlist's alive delegate refuses a member the
// book does not know, or that announces itself at another address than
// the book's; and every probe this agent makes, of a member and of its
// host, goes to the book's address. A node with no entry is not probed
// and gets no vote: fail open.
type AddressBook interface {
	// Member is where node's gossip member listens, per the API.
	Member(node string) (netip.AddrPort, bool)
	// Host is the node's kubelet port at the node's address; false when
	// the API holds none, or the port is 0: the host cannot be probed.
	Host(node string) (netip.AddrPort, bool)
	// Subscribe makes the book call f with a node's name each time that
	// node's member address is added or changes. f must return quickly.
	Subscribe(f func(node string))
}

// StaticBook is an AddressBook held in memory: for tests and MeasureLoad,
// which run members without an API server. Safe for concurrent use.
type StaticBook struct {
	mu      sync.Mutex
	members map[string]netip.AddrPort
	hosts   map[string]netip.AddrPort
	subs    []func(string)
}

// NewStaticBook returns an empty book.
func NewStaticBook() *StaticBook {
	return &StaticBook{members: map[string]netip.AddrPort{}, hosts: map[string]netip.AddrPort{}}
}

// Member is AddressBook's.
func (b *StaticBook) Member(node string) (netip.AddrPort, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.members[node]
	return a, ok
}

// Host is AddressBook's.
func (b *StaticBook) Host(node string) (netip.AddrPort, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.hosts[node]
	return a, ok
}

// Subscribe is AddressBook's.
func (b *StaticBook) Subscribe(f func(string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs = append(b.subs, f)
}

// SetMember sets (or, with an invalid address, removes) node's member
// address, and tells the subscribers when it was added or changed.
func (b *StaticBook) SetMember(node string, a netip.AddrPort) {
	b.mu.Lock()
	old, had := b.members[node]
	if !a.IsValid() {
		delete(b.members, node)
	} else {
		b.members[node] = a
	}
	subs := slices.Clone(b.subs)
	b.mu.Unlock()
	if a.IsValid() && (!had || old != a) {
		for _, f := range subs {
			f(node)
		}
	}
}

// SetHost sets (or, with an invalid address, removes) node's host
// address.
func (b *StaticBook) SetHost(node string, a netip.AddrPort) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !a.IsValid() {
		delete(b.hosts, node)
		return
	}
	b.hosts[node] = a
}

// Nodes lists the nodes with a member address.
func (b *StaticBook) Nodes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.members))
}

var _ AddressBook = (*StaticBook)(nil)

// udpAddr is a book address as memberlist's Ping takes it.
func udpAddr(a netip.AddrPort) net.Addr { return net.UDPAddrFromAddrPort(a) }

// refusal is why the alive delegate refused a member, the metric's reason
// label.
const (
	refusedUnknown = "UnknownToTheAPI"
	refusedAddress = "AddressDiffers"
)

// refusals counts the alive delegate's refusals and logs them, at most
// once per refusalLogEvery per node: a member refused keeps being
// announced, every gossip round.
type refusals struct {
	mu     sync.Mutex
	counts map[string]uint64    // by reason
	logged map[string]time.Time // by node
	quiet  map[string]uint64    // refusals not logged since, by node
}

const (
	refusalLogEvery  = 30 * time.Second
	refusalNodesKept = 4096
)

// add records a refusal of node for reason at now; log says whether to
// log it, and suppressed how many were not logged before it.
func (r *refusals) add(node, reason string, now time.Time) (log bool, suppressed uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts, r.logged, r.quiet = map[string]uint64{}, map[string]time.Time{}, map[string]uint64{}
	}
	r.counts[reason]++
	if len(r.logged) >= refusalNodesKept {
		// Names are the sender's to choose: a forger could make up a
		// new one per message. Forget them all rather than grow.
		r.logged, r.quiet = map[string]time.Time{}, map[string]uint64{}
	}
	if last, ok := r.logged[node]; ok && now.Sub(last) < refusalLogEvery {
		r.quiet[node]++
		return false, 0
	}
	suppressed = r.quiet[node]
	r.logged[node], r.quiet[node] = now, 0
	return true, suppressed
}

func (r *refusals) snapshot() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]uint64{refusedUnknown: 0, refusedAddress: 0}
	maps.Copy(out, r.counts)
	return out
}

// refuseReason is the alive delegate's rule: "" accepts node announced at
// at, else the reason it is refused. self is always accepted: this
// member's own address is the one it binds.
func refuseReason(book AddressBook, self string, node string, at netip.AddrPort) (reason string, want netip.AddrPort) {
	if node == self {
		return "", netip.AddrPort{}
	}
	want, ok := book.Member(node)
	switch {
	case !ok:
		return refusedUnknown, want
	case want.Addr().Unmap() != at.Addr().Unmap() || want.Port() != at.Port():
		return refusedAddress, want
	}
	return "", want
}

func refusalError(reason string, node string, at, want netip.AddrPort) error {
	if reason == refusedUnknown {
		return fmt.Errorf("member %s at %s is unknown to the API (no EndpointSlice entry of the gossip Service with that nodeName)", node, at)
	}
	return fmt.Errorf("member %s announced at %s, but the API has it at %s", node, at, want)
}
