package peering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"time"
)

// The published set (controller -> agents). The controller publishes the
// whole set as ONE document, in ConfigMap rebound-system/rebound-peer-set
// under key PeerSetKey; every agent watches that one object by name. So
// an agent reads O(N) bytes per change of the set, and nothing when
// another agent reports or a node heartbeats. The node label
// LabelInSet stays, for Calico's BGPPeer selector.
const (
	// DefaultPeerSetName and DefaultPeerSetNamespace name the ConfigMap.
	DefaultPeerSetName      = "rebound-peer-set"
	DefaultPeerSetNamespace = "rebound-system"
	// PeerSetKey is the ConfigMap key holding the JSON document.
	PeerSetKey = "peerset.json"
	// PeerSetVersion is the document's format version.
	PeerSetVersion = 1
)

// PeerSet is the published set.
type PeerSet struct {
	// Version is PeerSetVersion.
	Version int `json:"version"`
	// Generation grows by one with every change of the content; agents
	// echo it in their reports.
	Generation int64 `json:"generation"`
	// PublishedAt is when this generation was written (controller clock).
	PublishedAt time.Time `json:"publishedAt"`
	// Floor is the smallest number of members the controller stands
	// behind: an agent refuses a document with fewer Peers (or none) and
	// keeps its last good configuration.
	Floor int `json:"floor"`
	// Frozen is true while the controller holds every member in
	// (full disruption, or too large a share would leave at once);
	// FrozenReason says why.
	Frozen       bool   `json:"frozen,omitempty"`
	FrozenReason string `json:"frozenReason,omitempty"`
	// Peers are the members, sorted by name. An agent renders every member
	// but its own node.
	Peers []PublishedPeer `json:"peers"`
}

// PublishedPeer is one member of the set, with everything an agent needs
// to render and to judge it, resolved once by the controller.
type PublishedPeer struct {
	Name    string     `json:"name"`
	Address netip.Addr `json:"address"`
	// Port is the peer's BGP port; 0 means 179.
	Port uint16 `json:"port,omitempty"`
	// Ready is the node's Ready condition; ReadySince its last transition.
	Ready      bool      `json:"ready"`
	ReadySince time.Time `json:"readySince,omitzero"`
	// Reason is why the node is in the set (Ready, InGracePeriod, ...).
	Reason Reason `json:"reason"`
	// Alive, for a NotReady member, is the evidence that it is alive
	// (AliveEvidence): a live agent's fresh report of an Established
	// session newer than its NotReady transition, or BFD up.
	Alive string `json:"alive,omitempty"`
	// Lost, for a Ready member, is the evidence that the mesh has lost it
	// before the API noticed (Evidence.Lost); the start rule leaves it
	// out of a starting BIRD.
	Lost string `json:"lost,omitempty"`
}

// SameContent reports whether two documents publish the same set,
// whatever their generation and time: the controller writes only when
// this is false.
func (s PeerSet) SameContent(o PeerSet) bool {
	if s.Version != o.Version || s.Floor != o.Floor || s.Frozen != o.Frozen || s.FrozenReason != o.FrozenReason || len(s.Peers) != len(o.Peers) {
		return false
	}
	for i := range s.Peers {
		a, b := s.Peers[i], o.Peers[i]
		if a.Name != b.Name || a.Address != b.Address || a.Port != b.Port || a.Ready != b.Ready || !a.ReadySince.Equal(b.ReadySince) || a.Reason != b.Reason || a.Alive != b.Alive || a.Lost != b.Lost {
			return false
		}
	}
	return true
}

// Encode returns the document as the ConfigMap value.
func (s PeerSet) Encode() string {
	data, err := json.Marshal(s)
	if err != nil {
		// Strings, numbers, times and addresses always marshal.
		panic(fmt.Sprintf("encode peer set: %v", err))
	}
	return string(data)
}

// nodeName is a DNS-1123 subdomain, what Kubernetes allows as a node name.
var nodeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// maxPeerSetBytes bounds what ParsePeerSet reads: a ConfigMap holds at
// most 1 MiB.
const maxPeerSetBytes = 1 << 20

// ParsePeerSet reads a published document strictly: unknown fields, a
// wrong version, trailing data, bad names or addresses, unsorted or
// repeated names, and a floor above the member count are errors naming
// the field. An agent applies nothing it cannot parse.
func ParsePeerSet(data string) (PeerSet, error) {
	if len(data) > maxPeerSetBytes {
		return PeerSet{}, fmt.Errorf("peer set: %d bytes, more than a ConfigMap can hold (%d)", len(data), maxPeerSetBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.DisallowUnknownFields()
	var s PeerSet
	if err := dec.Decode(&s); err != nil {
		return PeerSet{}, fmt.Errorf("peer set: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return PeerSet{}, errors.New("peer set: data after the JSON document")
	}
	if err := s.Validate(); err != nil {
		return PeerSet{}, err
	}
	return s, nil
}

// Validate checks the document's fields, each error naming its field.
func (s PeerSet) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("peer set: "+format, args...)) }
	if s.Version != PeerSetVersion {
		add("version %d: this agent reads version %d (upgrade the agent or the controller so that they match)", s.Version, PeerSetVersion)
	}
	if s.Generation < 1 {
		add("generation %d: want 1 or more", s.Generation)
	}
	if s.PublishedAt.IsZero() {
		add("publishedAt is missing")
	}
	if s.Floor < 0 || s.Floor > len(s.Peers) {
		add("floor %d: want 0..%d (the number of peers)", s.Floor, len(s.Peers))
	}
	if s.Frozen && s.FrozenReason == "" {
		add("frozen without frozenReason")
	}
	for i, p := range s.Peers {
		switch {
		case len(p.Name) > 253 || !nodeName.MatchString(p.Name):
			add("peers[%d].name %q: not a node name", i, p.Name)
		case i > 0 && s.Peers[i-1].Name >= p.Name:
			add("peers[%d].name %q: names must be sorted and unique", i, p.Name)
		}
		if !p.Address.IsValid() || !p.Address.Is4() {
			add("peers[%d].address %q: want an IPv4 address", i, p.Address)
		}
		if p.Reason == "" || !p.Reason.In() {
			add("peers[%d].reason %q: not a reason that keeps a node in the set", i, p.Reason)
		}
	}
	return errors.Join(errs...)
}
