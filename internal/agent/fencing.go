package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"

	"rebound/internal/agent/feeder"
	"rebound/internal/agent/gossip"
	"rebound/internal/agent/watchdog"
	"rebound/pkg/fencing"
	"rebound/pkg/peering"
)

// Defaults of the fencing options.
const (
	// DefaultFencingPort is the UDP port the agents' fencing probes use,
	// beside the gossip's 7946.
	DefaultFencingPort = 7947
	// DefaultFencingState is the file on the host that keeps the member
	// list the agent counts against, so that an agent restarted during an
	// API outage still counts.
	DefaultFencingState = "/var/lib/rebound/fencing-list.json"
	// DefaultFencingDocumentName is the ConfigMap, in the controller's
	// namespace, that carries the member list and the open rounds.
	DefaultFencingDocumentName = "rebound-fencing"
	// bootIDPath is where Linux says which boot this is; the kubelet
	// reports the same file as the Node's status.nodeInfo.bootID.
	bootIDPath = "/proc/sys/kernel/random/boot_id"
)

// FencingOptions configure watchdog self-fencing (--watchdog-*, --fencing-*,
// docs/fencing.md). It is off unless Device is set, or Open is (the lab).
type FencingOptions struct {
	// Device is the watchdog device (--watchdog-device), e.g.
	// /dev/watchdog0.
	Device string
	// Timing is W (--watchdog-timeout) and T (--sanction-window).
	Timing fencing.Timing
	// Poll is how often the Lease is read and the members probed
	// (fencing.DefaultPollInterval unless set).
	Poll time.Duration
	// Port is the fencing probes' UDP port (--fencing-port).
	Port int
	// StatePath keeps the member list on the host (--fencing-state).
	StatePath string
	// Document is the ConfigMap the controller publishes the member list
	// and the rounds in (--fencing-document NAMESPACE/NAME).
	Document types.NamespacedName
	// Leases and Reports reach the API; the command sets them.
	Leases  feeder.LeaseReader
	Reports feeder.Reports
	// Open, BootClock and BootID stand in for the device, CLOCK_BOOTTIME
	// and the kernel's boot ID (the lab's watchdog stand-in); nil or
	// empty means the real ones.
	Open      func(timeout time.Duration) (watchdog.Device, error)
	BootClock func() time.Duration
	BootID    string
}

func (o Options) fencingOn() bool { return o.Fencing.Device != "" || o.Fencing.Open != nil }

// validateFencing names the flag of any bad fencing option.
func (o Options) validateFencing() error {
	if !o.fencingOn() {
		return nil
	}
	f := o.Fencing
	var errs []error
	if !o.gossipOn() {
		errs = append(errs, errors.New("--watchdog-device needs --gossip-key-file: the fencing probes are signed with the gossip keys and sent to the members the gossip's address book lists"))
	}
	if f.Device != "" && !filepath.IsAbs(f.Device) {
		errs = append(errs, fmt.Errorf("--watchdog-device %q: want the device's absolute path, e.g. /dev/watchdog0", f.Device))
	}
	if err := f.Timing.Validate(fencing.DefaultKubeletRenewInterval, f.Poll); err != nil {
		errs = append(errs, err)
	}
	if f.Port <= 0 || f.Port > 65535 || f.Port == o.Gossip.Port {
		errs = append(errs, fmt.Errorf("--fencing-port %d: want a UDP port other than --gossip-port %d (default %d)", f.Port, o.Gossip.Port, DefaultFencingPort))
	}
	if !filepath.IsAbs(f.StatePath) {
		errs = append(errs, fmt.Errorf("--fencing-state %q: want an absolute path on the host (default %s)", f.StatePath, DefaultFencingState))
	}
	if f.Document.Namespace == "" || f.Document.Name == "" {
		errs = append(errs, fmt.Errorf("--fencing-document %q: want NAMESPACE/NAME (default rebound-system/%s)", f.Document.String(), DefaultFencingDocumentName))
	}
	return errors.Join(errs...)
}

func (f FencingOptions) withDefaults() FencingOptions {
	if f.Timing == (fencing.Timing{}) {
		f.Timing = fencing.DefaultTiming()
	}
	if f.Poll == 0 {
		f.Poll = fencing.DefaultPollInterval
	}
	if f.Port == 0 {
		f.Port = DefaultFencingPort
	}
	if f.StatePath == "" {
		f.StatePath = DefaultFencingState
	}
	if f.Document.Name == "" {
		f.Document = types.NamespacedName{Namespace: peering.DefaultPeerSetNamespace, Name: DefaultFencingDocumentName}
	}
	return f
}

// startFencing runs the fencing loop (package feeder) on addr, with the
// members' addresses from book. stop ends it gracefully (the disarm
// protocol) and waits for it.
func (a *Agent) startFencing(ctx context.Context, addr netip.Addr, book *APIBook) (stop func(), err error) {
	f := a.opts.Fencing
	bootID, bootClock, open := f.BootID, f.BootClock, f.Open
	if bootID == "" {
		b, err := os.ReadFile(bootIDPath)
		if err != nil {
			return nil, fmt.Errorf("rebound agent: fencing needs the node's boot ID: %w", err)
		}
		bootID = strings.TrimSpace(string(b))
	}
	if bootClock == nil {
		bootClock = watchdog.BootClock
	}
	if open == nil {
		open = func(timeout time.Duration) (watchdog.Device, error) { return watchdog.Open(f.Device, timeout) }
	}
	conn, err := net.ListenPacket("udp", netip.AddrPortFrom(addr, uint16(f.Port)).String())
	if err != nil {
		return nil, fmt.Errorf("rebound agent: --fencing-port: %w", err)
	}
	if cut := a.opts.Gossip.Cut; cut != nil {
		conn = cutPacketConn{PacketConn: conn, cut: cut}
	}
	fctx, cancel := context.WithCancel(ctx)
	docs := a.watchFencingDocument(fctx)
	fd, err := feeder.New(feeder.Config{
		Node: a.opts.NodeName, Timing: f.Timing, Poll: f.Poll,
		Open: open, BootClock: bootClock, BootID: bootID,
		Leases: f.Leases, Reports: f.Reports, Document: docs,
		Conn: conn,
		Address: func(node string) (net.Addr, bool) {
			m, ok := book.Member(node)
			if !ok {
				return nil, false
			}
			return net.UDPAddrFromAddrPort(netip.AddrPortFrom(m.Addr(), uint16(f.Port))), true
		},
		Keys:      a.fencingKeys(),
		StatePath: f.StatePath,
		Logger:    a.log.With("component", "fencing"),
	})
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("rebound agent: %w", err)
	}
	a.mu.Lock()
	a.feeder = fd
	a.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close()
		if err := fd.Run(fctx); err != nil {
			a.log.Error("fencing: stopped without a clean disarm; the watchdog resets this node", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// fencingKeys returns the gossip keyring, read again from the key file
// at most every KeyReloadInterval; a file that cannot be read keeps the
// last keys, as the gossip member does.
func (a *Agent) fencingKeys() func() [][]byte {
	var mu sync.Mutex
	keys, read := a.gossipKeys, a.clock.Now()
	return func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		if now := a.clock.Now(); now.Sub(read) >= a.opts.Gossip.KeyReloadInterval {
			read = now
			if k, err := gossip.LoadKeys(a.opts.Gossip.KeyFile); err == nil {
				keys = k
			} else {
				a.log.Warn("fencing: gossip keys unreadable, keeping the last ones", "err", err)
			}
		}
		return keys
	}
}

// watchFencingDocument watches the ONE ConfigMap the controller publishes
// the fencing document in (RBAC: list and watch of that name only). It
// does not wait for the watch to sync: until it does, and whenever the
// document is absent or invalid, the feeder counts against the list it
// keeps on the host.
func (a *Agent) watchFencingDocument(ctx context.Context) func() (fencing.Document, bool) {
	d := a.opts.Fencing.Document
	factory := informers.NewSharedInformerFactoryWithOptions(a.opts.Client, 0,
		informers.WithNamespace(d.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", d.Name).String()
		}))
	lister := factory.Core().V1().ConfigMaps().Lister().ConfigMaps(d.Namespace)
	factory.Start(ctx.Done())
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return func() (fencing.Document, bool) {
		cm, err := lister.Get(d.Name)
		if err != nil {
			return fencing.Document{}, false
		}
		doc, err := fencing.ParseDocument([]byte(cm.Data[fencing.DocumentKey]))
		if err != nil {
			return fencing.Document{}, false
		}
		return doc, true
	}
}

// Feeder is the agent's fencing loop, nil unless it fences.
func (a *Agent) Feeder() *feeder.Feeder {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.feeder
}

// cutPacketConn drops the fencing probes to and from the addresses cut
// names (GossipOptions.Cut, the lab's partitions).
type cutPacketConn struct {
	net.PacketConn
	cut func(netip.Addr) bool
}

func (c cutPacketConn) isCut(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && c.cut(ap.Addr().Unmap())
}

func (c cutPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, from, err := c.PacketConn.ReadFrom(b)
		if err != nil || !c.isCut(from) {
			return n, from, err
		}
	}
}

func (c cutPacketConn) WriteTo(b []byte, to net.Addr) (int, error) {
	if c.isCut(to) {
		return len(b), nil // sent, and lost on the way
	}
	return c.PacketConn.WriteTo(b, to)
}
