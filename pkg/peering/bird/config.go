// Package bird renders BIRD configuration for the health-aware BGP mesh and
// reads the BIRD control socket's answers (`birdc show protocols`,
// `birdc show status`).
//
// Two syntaxes are rendered: BIRD 1.6 (the base of Calico's fork, Debian
// package "bird") and BIRD 2 (Debian package "bird2"). The mesh follows
// Calico's bird.cfg.template: one `protocol bgp Mesh_<ip>` per peer, built
// from one template, with `graceful restart` on and a per-peer
// `graceful restart time`; the node with the greater address (compared as
// text, as Calico's template does) is passive so that each pair has one
// connecting side. On top of Calico, the global `graceful restart wait` is
// rendered explicitly: it bounds how long a BIRD in graceful-restart
// recovery (`bird -R`) waits for peers before it programs routes.
//
// Syntax facts checked with the daemons' own parsers (`bird -p`, BIRD
// 1.6.8 and 2.0.12) and with running instances:
//
//   - `graceful restart wait N;` is a top-level option in both versions;
//     inside a protocol it is a syntax error. It may appear more than once
//     and the last one wins, so include the mesh file after any other.
//   - BIRD 1.6 listens through the global `listen bgp address A port P;`.
//     BIRD 2 has no `listen bgp`; it listens on the protocol's
//     `local A port P` and binds the wildcard address unless
//     `strict bind on;` is set.
//   - `neighbor A port P as N;` works in both. BIRD 2 needs a channel
//     (`ipv4 { ... }`) for import/export and `gateway recursive`.
//   - Neither parser range-checks `graceful restart time`; see
//     MaxGracefulRestartTime.
//
// Every value is checked before it reaches a template (see Validate), so a
// node name or a filter name cannot inject configuration.
package bird

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Version selects the configuration syntax.
type Version string

// Supported BIRD versions.
const (
	Bird16 Version = "1.6" // BIRD 1.6.x: IPv4 daemon, global `listen bgp`
	Bird2  Version = "2"   // BIRD 2.x: channels (`ipv4 { ... }`), per-protocol `local ... port`
)

// Defaults.
const (
	// DefaultGracefulRestartTime is Calico's default nodeMeshMaxRestartTime
	// and maxRestartTime: how long peers keep this node's routes while it
	// restarts.
	DefaultGracefulRestartTime = 120
	// DefaultGracefulRestartWait is BIRD's own default for the global
	// `graceful restart wait`; rendering it explicitly makes it visible.
	DefaultGracefulRestartWait = 240
	// MaxGracefulRestartTime is the largest restart time the BGP Graceful
	// Restart capability can carry (a 12-bit field, RFC 4724). BIRD's parser
	// accepts more but would announce a corrupt capability.
	MaxGracefulRestartTime = 4095
	// MaxGracefulRestartWait bounds the wait: BIRD accepts any number, but
	// more than 18 hours is a typo, not a policy.
	MaxGracefulRestartWait = 65535
	// DefaultHoldTime is BIRD's BGP hold time, seconds: without BFD, a
	// peer that vanishes without closing its TCP session (power loss) is
	// noticed only after it.
	DefaultHoldTime = 240
	// DefaultBGPPort is BGP's well-known port, rendered as BIRD's default.
	DefaultBGPPort = 179
	// DefaultBFDInterval and DefaultBFDMultiplier detect a dead peer in
	// 3 x 300 ms = 0.9 s: well under the 2 s goal, and loose enough that a
	// busy node's BIRD (BFD runs in BIRD's main loop, not in the kernel)
	// does not miss three packets in a row.
	DefaultBFDInterval   = 300 * time.Millisecond
	DefaultBFDMultiplier = 3
	// MinBFDInterval and MaxBFDInterval bound the interval: below 10 ms a
	// user-space daemon cannot keep up; above 10 s BFD detects nothing the
	// BGP hold timer would not.
	MinBFDInterval = 10 * time.Millisecond
	MaxBFDInterval = 10 * time.Second
)

// BFD configures Bidirectional Forwarding Detection for every mesh
// session: BIRD runs a BFD session beside each BGP session (multihop, like
// the BGP session), and a peer that stops answering is detected after
// Interval x Multiplier instead of the BGP hold time (BIRD's default
// 240 s). Sessions use `bfd graceful` (BIRD 1.6.8 and 2): a BFD failure
// starts BGP graceful restart, so a peer whose BIRD restarts while the
// node keeps forwarding keeps its routes for its graceful restart time,
// exactly as without BFD. A peer that runs no BFD is unaffected: BIRD
// acts only when a BFD session goes from Up to Down.
type BFD struct {
	// Interval is the desired transmit and required receive interval;
	// 0 means DefaultBFDInterval.
	Interval time.Duration
	// Multiplier is how many intervals without a packet mean the peer is
	// down; 0 means DefaultBFDMultiplier.
	Multiplier int
}

// withDefaults fills the zero fields.
func (b BFD) withDefaults() BFD {
	if b.Interval == 0 {
		b.Interval = DefaultBFDInterval
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultBFDMultiplier
	}
	return b
}

// Detection is how long a dead peer goes unnoticed at most.
func (b BFD) Detection() time.Duration {
	b = b.withDefaults()
	return b.Interval * time.Duration(b.Multiplier)
}

// Peer is one BGP neighbour in the mesh.
type Peer struct {
	// Name is the peer's node name, rendered as the protocol description.
	Name string
	// Address is the peer's BGP address (IPv4).
	Address netip.Addr
	// Port is the peer's BGP port; 0 means 179.
	Port uint16
	// AS is the peer's AS number; 0 means the local AS (iBGP mesh).
	AS uint32
	// GracefulRestartTime overrides MeshConfig.GracefulRestartTime for this
	// peer (Calico's BGPPeer maxRestartTime); 0 means the mesh's.
	GracefulRestartTime int
}

// MeshConfig is one node's view of the mesh: what its BIRD include needs.
type MeshConfig struct {
	Version Version
	// NodeName is the local node's name; a peer of that name is skipped.
	NodeName string
	// Address is the local BGP address: the source address of every
	// session. A peer with this address is skipped (Calico's "Skipping
	// ourselves").
	Address netip.Addr
	// AS is the local AS number, 1..4294967295.
	AS uint32
	// Peers is the peer set, typically peering.Result.Peers; order does not
	// matter, the output is sorted by address.
	Peers []Peer
	// GracefulRestartTime is the per-peer restart time in seconds
	// (Calico's nodeMeshMaxRestartTime); 0 means 120.
	GracefulRestartTime int
	// GracefulRestartWait is the global recovery wait in seconds; 0 means
	// 240, BIRD's default.
	GracefulRestartWait int
	// ListenPort, when set, makes BIRD listen for BGP on Address:ListenPort
	// only (BIRD 1.6: global `listen bgp address A port P`; BIRD 2:
	// `local A port P` with `strict bind`). 0 keeps BIRD's default: every
	// address, port 179. Tests use it to run several BIRDs on loopback.
	ListenPort uint16
	// ImportFilter and ExportFilter name BIRD filters defined elsewhere in
	// the configuration (Calico: calico_import_from_bgp_peers,
	// calico_export_to_bgp_peers). "" or "all" render `all`, "none" `none`.
	ImportFilter string
	ExportFilter string
	// BFD, when set, runs BFD with every peer (see BFD); nil renders no
	// BFD and a dead peer is noticed after the BGP hold time.
	BFD *BFD
}

// withDefaults fills the zero fields that have defaults.
func (c MeshConfig) withDefaults() MeshConfig {
	if c.GracefulRestartTime == 0 {
		c.GracefulRestartTime = DefaultGracefulRestartTime
	}
	if c.GracefulRestartWait == 0 {
		c.GracefulRestartWait = DefaultGracefulRestartWait
	}
	if c.BFD != nil {
		b := c.BFD.withDefaults()
		c.BFD = &b
	}
	return c
}

// Validate checks every field that reaches the template and names the
// offending one; all problems are reported at once.
func (c MeshConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	switch c.Version {
	case Bird16, Bird2:
	default:
		add(fmt.Errorf("version %q: want %q or %q", c.Version, Bird16, Bird2))
	}
	add(checkText("nodeName", c.NodeName))
	add(checkIPv4("address", c.Address))
	if c.AS == 0 {
		add(errors.New("as: 0 is not an AS number, want 1..4294967295"))
	}
	add(checkRange("gracefulRestartTime", c.GracefulRestartTime, 1, MaxGracefulRestartTime))
	add(checkRange("gracefulRestartWait", c.GracefulRestartWait, 1, MaxGracefulRestartWait))
	add(checkFilter("importFilter", c.ImportFilter))
	add(checkFilter("exportFilter", c.ExportFilter))
	if c.BFD != nil {
		if c.BFD.Interval < MinBFDInterval || c.BFD.Interval > MaxBFDInterval || c.BFD.Interval%time.Millisecond != 0 {
			add(fmt.Errorf("bfd.interval %v: want whole milliseconds in %v..%v", c.BFD.Interval, MinBFDInterval, MaxBFDInterval))
		}
		add(checkRange("bfd.multiplier", c.BFD.Multiplier, 1, 255))
	}

	names := map[string]int{}
	for i, p := range c.Peers {
		field := fmt.Sprintf("peers[%d]", i)
		add(checkText(field+".name", p.Name))
		add(checkIPv4(field+".address", p.Address))
		if p.GracefulRestartTime != 0 {
			add(checkRange(field+".gracefulRestartTime", p.GracefulRestartTime, 1, MaxGracefulRestartTime))
		}
		if c.skips(p) || !p.Address.IsValid() {
			continue
		}
		name := protocolName(p.Address)
		if j, dup := names[name]; dup {
			add(fmt.Errorf("%s.address %s: same as peers[%d], both would be protocol %s", field, p.Address, j, name))
		}
		names[name] = i
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("bird mesh config for node %q: %w", c.NodeName, errors.Join(errs...))
}

// skips reports whether p is the local node, which is not its own peer.
func (c MeshConfig) skips(p Peer) bool {
	return p.Name == c.NodeName || (p.Address.IsValid() && p.Address == c.Address)
}
