// Package agent is `rebound agent`: one per node, beside BIRD. It renders
// this node's BGP mesh from the peer set the controller publishes, keeps
// BIRD's configuration in step with it, reports the node's BGP sessions
// back to the controller, and answers readiness probes without being held
// back by peers that are not in the set.
//
// How the pieces talk (all through the Kubernetes API, see pkg/peering):
//
//	controller --ConfigMap rebound-system/rebound-peer-set (one JSON document)--watch by name--> agent
//	agent --PeeringReport <node> (its sessions, compact, timestamped)--> controller
//
// The agent watches one object, so it reads O(N) bytes per change of the
// set and nothing when other agents report or nodes heartbeat. It refuses
// an empty set, and one with fewer members than the floor published with
// it, keeping its last good file. Each change is debounced, rendered with pkg/peering/bird,
// written atomically (temporary file and rename) only when the bytes
// differ, and loaded with BIRD's `configure`; a configuration BIRD rejects,
// or cannot load because it is not running, is replaced by the last one it
// accepted, so a BIRD (re)start always finds a configuration that works.
package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"rebound/internal/agent/gossip"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// Defaults of the timing options.
const (
	DefaultDebounce         = time.Second
	DefaultRetryInterval    = time.Second
	DefaultMaxRetryInterval = 30 * time.Second
	DefaultStatusInterval   = 5 * time.Second
	DefaultReportInterval   = time.Minute
	// DefaultReadyAfter is how long the agent waits for the peers in the
	// set before it reports ready anyway: a peer that is in the set but
	// cannot connect (kept by the keep-in-mesh label, or within its prune
	// grace period) must not keep this node out of service for ever.
	DefaultReadyAfter = 3 * time.Minute
	// DefaultOnceTimeout bounds --once: an init container that waits for an
	// unreachable API server for ever would keep BIRD from starting at all,
	// which is worse than starting with the last good file.
	DefaultOnceTimeout = 30 * time.Second
)

// Options configure an agent. Validate names any bad field by its flag.
type Options struct {
	// NodeName is this node's Kubernetes name (--node-name).
	NodeName string
	// Client talks to the API server: this node's Node (get, once) and the
	// published set (watch, one ConfigMap by name).
	Client kubernetes.Interface
	// Reports writes this node's PeeringReport; nil writes none (tests,
	// --once).
	Reports ReportWriter
	// PeerSet is the ConfigMap the controller publishes the set in
	// (--peer-set NAMESPACE/NAME).
	PeerSet types.NamespacedName

	// Version selects the BIRD syntax (--bird-version).
	Version bird.Version
	// MeshPath is the include file to write (--mesh-file); BIRD's main
	// configuration must include it, last.
	MeshPath string
	// Socket is BIRD's control socket (--bird-socket).
	Socket string
	// Birdc, when set, runs that birdc binary instead of speaking the
	// control socket protocol directly (--birdc).
	Birdc string
	// BirdBinary and BirdConfig, when both set, let the agent check a new
	// file with BIRD's own parser (`bird -p -c BirdConfig`) while BIRD is
	// not running, and leave it in place for BIRD's start (--bird-binary,
	// --bird-config). Without them a file BIRD has not loaded is rolled
	// back to the last one it accepted.
	BirdBinary string
	BirdConfig string
	// Once applies the set a single time and returns (--once): run it
	// before BIRD starts (an init container, ExecStartPre) so that BIRD
	// starts with the current set.
	Once bool
	// OnceTimeout bounds --once (--once-timeout): past it, the agent keeps
	// the last good file and exits 0 if there is one, or fails if not.
	OnceTimeout time.Duration
	// AS is the local AS number (--as).
	AS uint32
	// Address is this node's BGP address (--address); unset means the
	// node's own, read from its Node object as the controller reads it.
	Address netip.Addr
	// ListenPort makes BIRD listen on Address:ListenPort only (--listen-port);
	// 0 keeps BIRD's default (port 179 on every address).
	ListenPort uint16
	// GracefulRestartTime is the per-peer restart time, seconds
	// (--graceful-restart-time); GracefulRestartWait the global wait of a
	// BIRD in graceful-restart recovery (--graceful-restart-wait).
	GracefulRestartTime int
	GracefulRestartWait int
	// ImportFilter and ExportFilter name BIRD filters defined in the main
	// configuration (--import-filter, --export-filter).
	ImportFilter string
	ExportFilter string
	// BFD runs a BFD session with every peer (--bfd, on by default on the
	// command line; off in the zero Options, since several BIRD 1.6 on
	// one host cannot share BFD's ports). BFDInterval and BFDMultiplier
	// tune them (--bfd-interval, --bfd-multiplier; 0 means bird's
	// defaults, 300 ms x 3).
	BFD           bool
	BFDInterval   time.Duration
	BFDMultiplier int

	// Debounce collects changes of the set for this long before one reload
	// (--debounce). RetryInterval is the first wait after a failed reload,
	// doubled up to MaxRetryInterval.
	Debounce         time.Duration
	RetryInterval    time.Duration
	MaxRetryInterval time.Duration
	// StatusInterval is how often BIRD's sessions are read (--status-interval).
	StatusInterval time.Duration
	// ReportInterval is the longest time between two session reports when
	// nothing changes (--report-interval); the controller drops reports
	// older than its --session-report-max-age, which must be longer.
	ReportInterval time.Duration
	// ReadyAfter: past this much time since the agent started, it is ready
	// even if peers in the set are not Established (--ready-after).
	ReadyAfter time.Duration

	// RejoinOnly runs only the rejoiner (--rejoin-only, rejoin.go): no
	// BIRD, no reports; it watches this node's Node and puts it back into
	// the Calico set when it is Ready. The BIRD options are ignored.
	RejoinOnly bool

	// Gossip makes this agent a member of the agents' gossip (package
	// gossip) when Gossip.KeyFile is set; beside BIRD, or alone with
	// GossipOnly.
	Gossip GossipOptions
	// Fencing makes the agent arm its node's watchdog and feed it only
	// while sanctioned (fencing.go, docs/fencing.md); beside the gossip,
	// whose keys and address book it uses.
	Fencing FencingOptions
	// GossipOnly runs only the gossip member and its writer
	// (--gossip-only): no BIRD, no peer set; the BIRD options are ignored.
	GossipOnly bool
	// UntaintAfter: a gossiping agent takes rebound's taint
	// rebound.dev/unreachable off its own node once it has seen the
	// node's Lease renewed this long ago with the taint still on, when no
	// controller has (--untaint-after, untaint.go); zero turns it off.
	UntaintAfter time.Duration

	// Clock is injected for tests; nil means the real clock.
	Clock clock.WithTicker
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Control replaces the BIRD client built from Socket and Birdc (tests).
	Control Control
}

// GossipOptions configure the gossip member (--gossip-*).
type GossipOptions struct {
	// KeyFile holds the cluster's shared gossip key (--gossip-key-file);
	// empty turns gossip off.
	KeyFile string
	// BindAddress is the address to gossip on (--gossip-bind-address);
	// unset means --address, else the node's BGP address as the agent
	// reads it from its Node.
	BindAddress netip.Addr
	// Port is the UDP and TCP port (--gossip-port); zero means
	// gossip.DefaultPort.
	Port int
	// Join lists host:port or DNS names to join through (--gossip-join).
	Join []string
	// Watchers is k (--gossip-watchers); zero means
	// liveness.DefaultWatchers. It must be the controller's
	// --gossip-watchers, which checks it against the gossip reads.
	Watchers int
	// ProbeInterval (--gossip-probe-interval); zero means
	// gossip.DefaultProbeInterval. Probes time out in half of it.
	ProbeInterval time.Duration
	// Reports writes the gossip read into this node's PeeringReport; nil
	// writes none (tests).
	Reports gossip.Writer
	// Service and Namespace name the members' Service, whose
	// EndpointSlices are the address book's member addresses
	// (--gossip-service, --gossip-namespace); empty means
	// DefaultGossipService, and POD_NAMESPACE else DefaultGossipNamespace.
	Service   string
	Namespace string
	// KeyReloadInterval is how often KeyFile is read again
	// (--gossip-key-reload-interval); zero means
	// gossip.DefaultKeyReloadInterval.
	KeyReloadInterval time.Duration
	// LeaseMargin is how long past its renew interval a node's Lease may
	// go unrenewed before the member takes the node for lost and, if its
	// own Lease renews, may witness it (--lease-margin, the controller's
	// flag of the same name); zero means liveness.DefaultLeaseMargin.
	LeaseMargin time.Duration
	// Cut, when set, drops the gossip and fencing traffic to and from the
	// addresses it names: the lab's network partitions (rebound sandbox
	// agent). Nil in production.
	Cut func(netip.Addr) bool
}

// gossipOn says whether this agent gossips.
func (o Options) gossipOn() bool { return o.Gossip.KeyFile != "" }

// gossipConfig is the member's configuration on addr.
func (o Options) gossipConfig(addr netip.Addr, keys [][]byte, book gossip.AddressBook, leases gossip.LeaseSource) gossip.Config {
	return gossip.Config{
		NodeName:          o.NodeName,
		BindAddr:          addr,
		BindPort:          o.Gossip.Port,
		Keys:              keys,
		KeyFile:           o.Gossip.KeyFile,
		KeyReloadInterval: o.Gossip.KeyReloadInterval,
		Book:              book,
		Join:              o.Gossip.Join,
		Watchers:          o.Gossip.Watchers,
		ReportInterval:    o.ReportInterval,
		ProbeInterval:     o.Gossip.ProbeInterval,
		ProbeTimeout:      o.Gossip.ProbeInterval / 2,
		RetryInterval:     o.RetryInterval,
		MaxRetryInterval:  o.MaxRetryInterval,
		Writer:            o.Gossip.Reports,
		Leases:            leases,
		LeaseMargin:       o.Gossip.LeaseMargin,
		Logger:            o.Logger,
		Cut:               o.Gossip.Cut,
	}
}

// validateGossip checks the gossip flags: with --gossip-key-file, the key
// and everything the member needs; without it, that no other gossip flag
// asks for a gossip that will not run.
func (o Options) validateGossip() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !o.gossipOn() {
		switch {
		case o.GossipOnly:
			add("--gossip-only needs --gossip-key-file: an agent without the cluster's gossip key cannot take part in the gossip")
		case len(o.Gossip.Join) > 0 || o.Gossip.BindAddress.IsValid():
			add("--gossip-join and --gossip-bind-address need --gossip-key-file: without the key the agent does not gossip")
		}
		return errors.Join(errs...)
	}
	if o.RejoinOnly {
		add("--gossip-key-file with --rejoin-only: the rejoiner does not gossip; run the gossip in its own agent with --gossip-only")
	}
	if o.Once {
		add("--gossip-key-file with --once: --once applies the peer set once for BIRD's start and exits; gossip in the agent that keeps running")
	}
	if o.Gossip.ProbeInterval < 0 {
		add("--gossip-probe-interval %v: must not be negative", o.Gossip.ProbeInterval)
	}
	if o.UntaintAfter < 0 {
		add("--untaint-after %v: must not be negative (0 turns the removal of a leftover %s taint off; default %v)", o.UntaintAfter, "rebound.dev/unreachable", DefaultUntaintAfter)
	}
	if o.Gossip.KeyReloadInterval < 0 {
		add("--gossip-key-reload-interval %v: must not be negative (default %v)", o.Gossip.KeyReloadInterval, gossip.DefaultKeyReloadInterval)
	}
	if errs := validation.IsDNS1123Label(o.Gossip.Service); o.Gossip.Service != "" && len(errs) > 0 {
		add("--gossip-service %q: want the members' Service name (default %s): %s", o.Gossip.Service, DefaultGossipService, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(o.Gossip.Namespace); o.Gossip.Namespace != "" && len(errs) > 0 {
		add("--gossip-namespace %q: want the members' namespace (default: $POD_NAMESPACE, else %s): %s", o.Gossip.Namespace, DefaultGossipNamespace, strings.Join(errs, "; "))
	}
	keys, err := gossip.LoadKeys(o.Gossip.KeyFile)
	if err != nil {
		errs = append(errs, err)
		keys = [][]byte{make([]byte, 32)} // check the rest all the same
	}
	// The address may come from the Node later: check the rest with a
	// placeholder, as the mesh check does.
	addr := o.Gossip.BindAddress
	if !addr.IsValid() {
		addr = netip.AddrFrom4([4]byte{192, 0, 2, 1})
	}
	// The book comes from the API once running: a placeholder here.
	if err := o.gossipConfig(addr, keys, gossip.NewStaticBook(), nil).WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// WithDefaults fills zero fields that have defaults.
func (o Options) WithDefaults() Options {
	if o.fencingOn() {
		o.Fencing = o.Fencing.withDefaults()
	}
	if o.Version == "" {
		o.Version = bird.Bird16
	}
	if o.GracefulRestartTime == 0 {
		o.GracefulRestartTime = bird.DefaultGracefulRestartTime
	}
	if o.GracefulRestartWait == 0 {
		o.GracefulRestartWait = bird.DefaultGracefulRestartWait
	}
	defaults := []struct {
		d *time.Duration
		v time.Duration
	}{
		{&o.Debounce, DefaultDebounce},
		{&o.RetryInterval, DefaultRetryInterval},
		{&o.MaxRetryInterval, DefaultMaxRetryInterval},
		{&o.StatusInterval, DefaultStatusInterval},
		{&o.ReportInterval, DefaultReportInterval},
		{&o.ReadyAfter, DefaultReadyAfter},
		{&o.OnceTimeout, DefaultOnceTimeout},
	}
	for _, d := range defaults {
		if *d.d == 0 {
			*d.d = d.v
		}
	}
	if o.Gossip.Port == 0 {
		o.Gossip.Port = gossip.DefaultPort
	}
	if o.Gossip.ProbeInterval == 0 {
		o.Gossip.ProbeInterval = gossip.DefaultProbeInterval
	}
	if o.Gossip.KeyReloadInterval == 0 {
		o.Gossip.KeyReloadInterval = gossip.DefaultKeyReloadInterval
	}
	if o.Gossip.Service == "" {
		o.Gossip.Service = DefaultGossipService
	}
	if o.Gossip.Namespace == "" {
		o.Gossip.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.Gossip.Namespace == "" {
		o.Gossip.Namespace = DefaultGossipNamespace
	}
	if o.PeerSet.Name == "" {
		o.PeerSet.Name = peering.DefaultPeerSetName
	}
	if o.PeerSet.Namespace == "" {
		o.PeerSet.Namespace = peering.DefaultPeerSetNamespace
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Control == nil {
		o.Control = bird.Client{Socket: o.Socket, Birdc: o.Birdc}
	}
	return o
}

// Validate reports every invalid option at once, each named by its flag.
func (o Options) Validate() error {
	err := o.ValidateFlags()
	if o.Client == nil {
		err = errors.Join(err, errors.New("no Kubernetes client (--kubeconfig, or run in a pod)"))
	}
	if o.fencingOn() && (o.Fencing.Leases == nil || o.Fencing.Reports == nil) {
		err = errors.Join(err, errors.New("fencing needs the API: no Lease reader or report writer"))
	}
	return err
}

// ValidateFlags checks everything but the client: the command line checks
// it before it connects anywhere.
func (o Options) ValidateFlags() error {
	gossipErr := errors.Join(o.validateGossip(), o.validateFencing())
	switch {
	case o.RejoinOnly:
		if o.fencingOn() {
			gossipErr = errors.Join(gossipErr, errors.New("--watchdog-device: not with --rejoin-only, which runs no gossip"))
		}
		return errors.Join(o.validateRejoinOnly(), gossipErr)
	case o.GossipOnly:
		// Only the gossip runs: the BIRD flags are not read.
		return gossipErr
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.NodeName == "" {
		add("--node-name: required (in a DaemonSet, set it from spec.nodeName)")
	}
	switch o.Version {
	case bird.Bird16, bird.Bird2:
	default:
		add("--bird-version %q: want %q or %q", o.Version, bird.Bird16, bird.Bird2)
	}
	if o.MeshPath == "" || !filepath.IsAbs(o.MeshPath) {
		add("--mesh-file %q: want the absolute path of the include file BIRD's configuration includes", o.MeshPath)
	}
	if c, ok := o.Control.(bird.Client); (ok || o.Control == nil) && c.Socket == "" && o.Socket == "" {
		add("--bird-socket: required (BIRD's control socket, bird -s)")
	}
	if o.PeerSet.Name == "" || o.PeerSet.Namespace == "" {
		add("--peer-set %q: want NAMESPACE/NAME of the ConfigMap the controller publishes (default %s/%s)", o.PeerSet.String(), peering.DefaultPeerSetNamespace, peering.DefaultPeerSetName)
	}
	if o.AS == 0 {
		add("--as: required, 1..4294967295")
	}
	if (o.BirdBinary == "") != (o.BirdConfig == "") {
		add("--bird-binary and --bird-config: give both or neither")
	}
	if o.Address.IsValid() && !o.Address.Is4() {
		add("--address %s: want an IPv4 address", o.Address)
	}
	if o.GracefulRestartTime < 0 || o.GracefulRestartTime > bird.MaxGracefulRestartTime {
		add("--graceful-restart-time %d: want 1..%d seconds", o.GracefulRestartTime, bird.MaxGracefulRestartTime)
	}
	if o.GracefulRestartWait < 0 || o.GracefulRestartWait > bird.MaxGracefulRestartWait {
		add("--graceful-restart-wait %d: want 1..%d seconds", o.GracefulRestartWait, bird.MaxGracefulRestartWait)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--debounce", o.Debounce}, {"--retry-interval", o.RetryInterval}, {"--max-retry-interval", o.MaxRetryInterval},
		{"--status-interval", o.StatusInterval}, {"--report-interval", o.ReportInterval}, {"--ready-after", o.ReadyAfter},
		{"--once-timeout", o.OnceTimeout},
	} {
		if d.v < 0 {
			add("%s %v: must not be negative", d.flag, d.v)
		}
	}
	if o.MaxRetryInterval > 0 && o.RetryInterval > o.MaxRetryInterval {
		add("--retry-interval %v is above --max-retry-interval %v", o.RetryInterval, o.MaxRetryInterval)
	}
	if o.ReportInterval > 0 && o.StatusInterval > o.ReportInterval {
		add("--status-interval %v is above --report-interval %v: reports could not be refreshed in time", o.StatusInterval, o.ReportInterval)
	}
	if len(errs) == 0 {
		// The mesh fields are checked by the renderer itself, with a
		// placeholder address when the real one comes from the Node.
		m := o.meshBase()
		if !m.Address.IsValid() {
			m.Address = netip.AddrFrom4([4]byte{192, 0, 2, 1})
		}
		if err := m.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, gossipErr)...)
}

// meshBase is the mesh configuration without peers.
func (o Options) meshBase() bird.MeshConfig {
	return bird.MeshConfig{
		Version:             o.Version,
		NodeName:            o.NodeName,
		Address:             o.Address,
		AS:                  o.AS,
		GracefulRestartTime: o.GracefulRestartTime,
		GracefulRestartWait: o.GracefulRestartWait,
		ListenPort:          o.ListenPort,
		ImportFilter:        o.ImportFilter,
		ExportFilter:        o.ExportFilter,
		BFD:                 o.bfd(),
	}
}

// bfd is the mesh's BFD setting: nil when turned off.
func (o Options) bfd() *bird.BFD {
	if !o.BFD {
		return nil
	}
	return &bird.BFD{Interval: o.BFDInterval, Multiplier: o.BFDMultiplier}
}
