package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"rebound/pkg/liveness"
)

// Defaults of Config. The probe timings are for a LAN, where a round trip
// takes well under a millisecond: a dead member is suspected within about
// two probe intervals and declared dead a suspicion timeout later (see
// memberlistConfig), seconds after its death rather than the tens of
// seconds of memberlist's own LAN profile.
const (
	// DefaultPort is memberlist's usual port. MetalLB's speakers default
	// to it too: on a node that runs both, give one of them another.
	DefaultPort           = 7946
	DefaultProbeInterval  = 500 * time.Millisecond
	DefaultProbeTimeout   = 250 * time.Millisecond
	DefaultGossipInterval = 200 * time.Millisecond
	// DefaultReportInterval: the controller drops gossip reads older than
	// its report max age (three minutes by default), so one lost write
	// does not silence a watcher.
	DefaultReportInterval = time.Minute
	// DefaultDeadRetention is how long a dead member stays on this
	// agent's ring. While it is there its watchers keep watching it, so
	// the controller hears the same watchers it computes; past it, a node
	// that never came back no longer takes a seat on the ring.
	DefaultDeadRetention = 10 * time.Minute
	// DefaultProbeAttempts is how many direct probes must all go
	// unanswered before this agent calls a member dead: one lost UDP
	// packet must not make a vote.
	DefaultProbeAttempts = 3
	// DefaultWriteDebounce is the least time between two writes of a
	// changed read: a change is written at once when the last write is
	// older, else when it is that old. A burst (the Leases of a hundred
	// cut-off nodes going stale over one renew interval) then costs an
	// agent at most one write a second, not one per probe, and an
	// isolated change (a death, a loss) is written without delay.
	DefaultWriteDebounce    = time.Second
	DefaultRetryInterval    = time.Second
	DefaultMaxRetryInterval = 30 * time.Second
)

// Config configures a Member. Validate names bad fields by the agent's
// flags, which set them.
type Config struct {
	// NodeName is this member's name: the Kubernetes node name, the name
	// the controller's ring and the other agents' reports use.
	NodeName string
	// BindAddr is the address memberlist binds and advertises: the
	// node's own, which the other members dial.
	BindAddr netip.Addr
	// BindPort is the UDP and TCP port; zero means DefaultPort.
	BindPort int
	// Keys is the cluster's shared keyring, AES keys of 16, 24 or 32
	// bytes: the first (the primary) encrypts every message, and every
	// incoming one must decrypt with one of them, so that an agent
	// without a key can neither join nor speak of a member. LoadKeys reads
	// them from the agent's --gossip-key-file.
	Keys [][]byte
	// Key is a keyring of one key, when Keys is empty.
	Key []byte
	// KeyFile, when set, is re-read every KeyReloadInterval and its keys
	// applied to the running keyring (a rotation without restarting).
	KeyFile           string
	KeyReloadInterval time.Duration
	// Book is the address book read from the API: which members exist,
	// and where a member and its host are probed. Required.
	Book AddressBook
	// HostProber probes a silent member's host; nil means a
	// TCPHostProber with DefaultHostProbeTimeout.
	HostProber HostProber
	// Cut, when set, drops the gossip traffic to and from the addresses
	// it names, as a cut link does: the lab's network partitions between
	// agents that share a host's loopback. Nil in production.
	Cut func(netip.Addr) bool
	// Join lists members to join through: host:port, or host alone for
	// BindPort; a DNS name (a headless Service of the agents) stands for
	// every address it resolves to.
	Join []string
	// Watchers is k, how many members watch each member; zero means
	// liveness.DefaultWatchers. It must be the controller's
	// --gossip-watchers: the member writes it in its gossip read, and the
	// controller names every agent whose number differs.
	Watchers int
	// ReportInterval is the longest time between two writes of the gossip
	// read when nothing changes; zero means DefaultReportInterval.
	ReportInterval time.Duration
	// WriteDebounce is the least time between two writes of a changed
	// read; zero means DefaultWriteDebounce.
	WriteDebounce time.Duration
	// Leases is the Lease plane on this agent's clock: with it, this
	// member witnesses the nodes whose Lease goes stale while its own
	// renews (witness.go); nil witnesses nobody. LeaseMargin is the
	// plane's margin past the renew interval, the controller's
	// --lease-margin; zero means liveness.DefaultLeaseMargin.
	Leases      LeaseSource
	LeaseMargin time.Duration
	// ProbeInterval and ProbeTimeout tune memberlist's failure detector
	// and this agent's own direct probes; GossipInterval how often state
	// changes are relayed. Zero means the defaults above.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	// DeadRetention: zero means DefaultDeadRetention.
	DeadRetention time.Duration
	// RetryInterval is the first wait after a failed join or write,
	// doubled up to MaxRetryInterval.
	RetryInterval    time.Duration
	MaxRetryInterval time.Duration
	// Writer writes the gossip read; nil writes none.
	Writer Writer
	// Logger; nil means slog.Default(). memberlist's own lines go to it
	// too, with component=memberlist.
	Logger *slog.Logger

	// anyPort binds a free port instead of BindPort: tests and MeasureLoad
	// run many members on one machine, beside anything else running there.
	anyPort bool
}

// WithDefaults fills the zero fields that have defaults.
func (c Config) WithDefaults() Config {
	if c.BindPort == 0 {
		c.BindPort = DefaultPort
	}
	if c.Watchers == 0 {
		c.Watchers = liveness.DefaultWatchers
	}
	for _, d := range []struct {
		d *time.Duration
		v time.Duration
	}{
		{&c.ReportInterval, DefaultReportInterval},
		{&c.WriteDebounce, DefaultWriteDebounce},
		{&c.LeaseMargin, liveness.DefaultLeaseMargin},
		{&c.ProbeInterval, DefaultProbeInterval},
		{&c.ProbeTimeout, DefaultProbeTimeout},
		{&c.GossipInterval, DefaultGossipInterval},
		{&c.DeadRetention, DefaultDeadRetention},
		{&c.RetryInterval, DefaultRetryInterval},
		{&c.MaxRetryInterval, DefaultMaxRetryInterval},
	} {
		if *d.d == 0 {
			*d.d = d.v
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Keys) == 0 && c.Key != nil {
		c.Keys = [][]byte{c.Key}
	}
	if c.KeyReloadInterval == 0 {
		c.KeyReloadInterval = DefaultKeyReloadInterval
	}
	if c.HostProber == nil {
		c.HostProber = TCPHostProber{}
	}
	return c
}

// Validate reports every bad field at once, each named by the agent's flag.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.NodeName == "" {
		add("--node-name: required: the gossip member's name is the node's")
	}
	switch {
	case !c.BindAddr.IsValid():
		add("--gossip-bind-address: required: this node's address, the one the other agents dial")
	case c.BindAddr.IsUnspecified():
		add("--gossip-bind-address %s: want this node's own address: a member advertises the address it binds, and the others dial it", c.BindAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		add("--gossip-port %d: want 1..65535 (default %d)", c.BindPort, DefaultPort)
	}
	if len(c.Keys) == 0 {
		add("--gossip-key-file: %v", ValidateKey(nil))
	}
	for i, k := range c.Keys {
		if err := ValidateKey(k); err != nil {
			add("--gossip-key-file: key %d: %v", i+1, err)
		}
	}
	if c.Book == nil {
		add("no address book: the agent reads the members' and hosts' addresses from the API (--gossip-service, --gossip-namespace)")
	}
	if c.KeyReloadInterval < 0 {
		add("--gossip-key-reload-interval %v: must not be negative (default %v)", c.KeyReloadInterval, DefaultKeyReloadInterval)
	}
	if len(c.Join) == 0 {
		add("--gossip-join: required: the agents' headless Service, or host:port of a few members; every agent may list itself too")
	}
	for _, j := range c.Join {
		if err := validateSeed(j); err != nil {
			add("--gossip-join %q: %v", j, err)
		}
	}
	if c.LeaseMargin != 0 {
		errs = append(errs, liveness.CheckLeaseMargin("--lease-margin", c.LeaseMargin))
	}
	// The controller's rule for its own --gossip-watchers, which must be
	// the same.
	if err := liveness.CheckWatchers("--gossip-watchers", c.Watchers); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--report-interval", c.ReportInterval}, {"--gossip-probe-interval", c.ProbeInterval}, {"gossip write debounce", c.WriteDebounce},
		{"gossip probe timeout", c.ProbeTimeout}, {"gossip interval", c.GossipInterval},
		{"dead retention", c.DeadRetention}, {"--retry-interval", c.RetryInterval}, {"--max-retry-interval", c.MaxRetryInterval},
	} {
		if d.v < 0 {
			add("%s %v: must not be negative", d.flag, d.v)
		}
	}
	if c.MaxRetryInterval > 0 && c.RetryInterval > c.MaxRetryInterval {
		add("--retry-interval %v is above --max-retry-interval %v", c.RetryInterval, c.MaxRetryInterval)
	}
	if c.ProbeInterval > 0 && c.ProbeTimeout >= c.ProbeInterval {
		add("gossip probe timeout %v must be below --gossip-probe-interval %v: memberlist waits for indirect probes in the rest of the interval", c.ProbeTimeout, c.ProbeInterval)
	}
	return errors.Join(errs...)
}

func validateSeed(s string) error {
	if s == "" {
		return errors.New("empty entry")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// A bare host (or a bare IPv6 address) means BindPort.
		if _, perr := netip.ParseAddr(s); perr == nil {
			return nil
		}
		if strings.ContainsAny(s, ":/ ") {
			return fmt.Errorf("want host:port, host or a DNS name: %v", err)
		}
		return nil
	}
	if host == "" {
		return errors.New("want host:port: the host is missing")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q: want 1..65535", port)
	}
	return nil
}

// ValidateKey checks an AES key's length.
func ValidateKey(key []byte) error {
	switch len(key) {
	case 16, 24, 32:
		return nil
	case 0:
		return errors.New("no key: every agent needs the cluster's shared gossip key")
	}
	return fmt.Errorf("the key is %d bytes: want an AES key of 16, 24 or 32 bytes", len(key))
}
