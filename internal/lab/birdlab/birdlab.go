// Package birdlab runs a small BGP "cluster" of real BIRD daemons, the
// Calico way (full mesh, graceful restart, one /26 announced per node), on
// loopback addresses, optionally inside a network namespace so that one
// node's kernel routing table can be watched. The S4 end-to-end tests and
// `rebound-bench s4` share it, so the benchmark measures exactly what the
// tests prove.
//
// Safety: every address is in 127.0.0.0/8 (inside the lab's own network
// namespace when it has one); announced prefixes come from 198.18.0.0/15,
// the range reserved for benchmarks (RFC 2544), and are blackhole routes:
// no packet is ever sent to them. Daemons are stopped by the PID started,
// and Close deletes the namespace the lab created.
package birdlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"rebound/internal/lab/birdproc"
	"rebound/pkg/peering/bird"
)

// Options describe a lab.
type Options struct {
	Bins birdproc.Binaries
	// Nodes is the number of BIRD nodes, 2..32.
	Nodes int
	// Net picks the lab's loopback /16, 127.Net.0.0, and its block of
	// announced prefixes; labs that run at the same time need different
	// values, 1..63.
	Net int
	// Dir holds configurations and sockets; it should be short (unix
	// socket paths are limited to 107 bytes).
	Dir string
	// AS of the mesh; 0 means 64512, Calico's default.
	AS uint32
	// GracefulRestartTime (per peer) and GracefulRestartWait (global), in
	// seconds; 0 means BIRD's defaults (120 and 240).
	GracefulRestartTime int
	GracefulRestartWait int
	// Include makes every node's main configuration include a mesh file
	// (Node.MeshPath) instead of carrying the mesh inline: what
	// `rebound agent` manages. The lab writes the initial full mesh there.
	Include bool
	// NetNS, when set, is the name of a network namespace the lab creates
	// (`ip netns add`) and runs every daemon in; the node KernelNode then
	// has a kernel protocol with graceful restart exporting its learned
	// routes to the namespace's main table.
	NetNS      string
	KernelNode int
	// NodeName names node i; nil means "node-<i>".
	NodeName func(i int) string
	// Port, when set, is every node's BGP port (each on its own address),
	// as on real nodes; 0 picks a free port per node.
	Port uint16
	// BFD, when set, runs BFD with every peer. Only BIRD 2 can: it binds
	// BFD to the node's address (strict bind); several BIRD 1.6 on one
	// host share BFD's ports and their sessions flap.
	BFD *bird.BFD
	// ExternalConfig, when set, gives node n's main configuration file,
	// which something else writes before the node starts (Calico's confd:
	// internal/lab/confdlab); the lab writes and checks none, and adds no
	// kernel protocol of its own (KernelNode is ignored).
	ExternalConfig func(n *Node) string
	// ProtocolNames are the names a node's BIRD may give its session with
	// the peer at addr; nil means rebound's (bird.ProtocolName).
	ProtocolNames func(addr netip.Addr) []string
}

// Node is one BIRD node of the lab.
type Node struct {
	Index    int
	Name     string
	Address  netip.Addr
	Port     uint16
	Route    netip.Prefix // the /26 it announces
	Config   string       // main configuration file
	MeshPath string       // the mesh include (Options.Include)
	Socket   string
	Kernel   bool

	protocolNames func(netip.Addr) []string

	mu     sync.Mutex
	daemon *birdproc.Daemon
}

// Daemon returns the running daemon, nil when the node is down.
func (n *Node) Daemon() *birdproc.Daemon {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.daemon
}

// Client talks to the node's control socket.
func (n *Node) Client() bird.Client { return bird.Client{Socket: n.Socket} }

// Peer is the node as a mesh peer.
func (n *Node) Peer() bird.Peer { return bird.Peer{Name: n.Name, Address: n.Address, Port: n.Port} }

// Lab is a running set of nodes.
type Lab struct {
	opts   Options
	Nodes  []*Node
	netns  bool
	closed bool
}

// New writes every node's configuration (each node peers with all others)
// and creates the network namespace; it starts no daemon.
func New(opts Options) (*Lab, error) {
	if opts.Nodes < 2 || opts.Nodes > 32 {
		return nil, fmt.Errorf("birdlab: nodes %d: want 2..32", opts.Nodes)
	}
	if opts.BFD != nil && opts.Bins.Version != bird.Bird2 {
		return nil, fmt.Errorf("birdlab: BFD needs BIRD 2 (strict bind): several BIRD %s on one host share BFD's ports", opts.Bins.Version)
	}
	if opts.Net < 1 || opts.Net > 63 {
		return nil, fmt.Errorf("birdlab: net %d: want 1..63", opts.Net)
	}
	if opts.AS == 0 {
		opts.AS = 64512
	}
	if opts.NodeName == nil {
		opts.NodeName = func(i int) string { return fmt.Sprintf("node-%d", i) }
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	l := &Lab{opts: opts}
	if opts.NetNS != "" {
		if out, err := exec.Command("ip", "netns", "add", opts.NetNS).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("birdlab: ip netns add %s: %v: %s (network namespaces need root; run without a namespace to measure BIRD's table only)", opts.NetNS, err, strings.TrimSpace(string(out)))
		}
		l.netns = true
		if out, err := exec.Command("ip", "-n", opts.NetNS, "link", "set", "lo", "up").CombinedOutput(); err != nil {
			l.Close()
			return nil, fmt.Errorf("birdlab: bring lo up in %s: %v: %s", opts.NetNS, err, out)
		}
	}
	for i := range opts.Nodes {
		addr := netip.AddrFrom4([4]byte{127, byte(opts.Net), byte(i / 200), byte(i%200 + 2)})
		port, err := freePort(addr, l.netns)
		if opts.Port != 0 {
			port, err = opts.Port, checkPort(addr, opts.Port, l.netns)
		}
		if err != nil {
			l.Close()
			return nil, err
		}
		n := &Node{
			Index:    i,
			Name:     opts.NodeName(i),
			Address:  addr,
			Port:     port,
			Route:    prefixFor(opts.Net, i),
			Config:   filepath.Join(opts.Dir, fmt.Sprintf("n%d.conf", i)),
			MeshPath: filepath.Join(opts.Dir, fmt.Sprintf("n%d-mesh.conf", i)),
			Socket:   filepath.Join(opts.Dir, fmt.Sprintf("n%d.ctl", i)),
			Kernel:   l.netns && i == opts.KernelNode && opts.ExternalConfig == nil,

			protocolNames: opts.ProtocolNames,
		}
		if opts.ExternalConfig != nil {
			n.Config = opts.ExternalConfig(n)
		}
		l.Nodes = append(l.Nodes, n)
	}
	for _, n := range l.Nodes {
		if opts.ExternalConfig != nil {
			break
		}
		if err := l.writeConfig(n); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// prefixFor gives node i of lab net its /26 in 198.18.0.0/15: 32 per lab.
func prefixFor(net, i int) netip.Prefix {
	k := uint32(net*32+i) * 64
	base := uint32(198)<<24 | uint32(18)<<16
	v := base + k
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 26)
}

// MeshConfig is node n's mesh with the given peers: what the lab writes at
// start (all other nodes) and what an agent renders for the set.
func (l *Lab) MeshConfig(n *Node, peers []bird.Peer) bird.MeshConfig {
	return bird.MeshConfig{
		Version:             l.opts.Bins.Version,
		NodeName:            n.Name,
		Address:             n.Address,
		AS:                  l.opts.AS,
		Peers:               peers,
		GracefulRestartTime: l.opts.GracefulRestartTime,
		GracefulRestartWait: l.opts.GracefulRestartWait,
		ListenPort:          n.Port,
		BFD:                 l.opts.BFD,
	}
}

// Bins are the BIRD binaries the lab runs.
func (l *Lab) Bins() birdproc.Binaries { return l.opts.Bins }

// Peers returns every node but except as mesh peers.
func (l *Lab) Peers(except *Node) []bird.Peer {
	var out []bird.Peer
	for _, n := range l.Nodes {
		if n != except {
			out = append(out, n.Peer())
		}
	}
	return out
}

func (l *Lab) writeConfig(n *Node) error {
	sc := StandaloneConfig{
		Mesh:   l.MeshConfig(n, l.Peers(n)),
		Routes: []netip.Prefix{n.Route},
	}
	if n.Kernel {
		sc.Kernel = &KernelConfig{Export: true}
	}
	if l.opts.Include {
		sc.MeshInclude = n.MeshPath
		mesh, err := bird.RenderMesh(sc.Mesh)
		if err != nil {
			return err
		}
		if err := os.WriteFile(n.MeshPath, mesh, 0o644); err != nil {
			return err
		}
	}
	out, err := RenderStandalone(sc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.Config, out, 0o644); err != nil {
		return err
	}
	return l.opts.Bins.Parse(n.Config)
}

// Start starts node n's daemon; recovery starts it with -R.
func (l *Lab) Start(ctx context.Context, n *Node, recovery bool) error {
	d, err := birdproc.Start(ctx, l.opts.Bins, n.Config, birdproc.Options{Recovery: recovery, NetNS: l.opts.NetNS, Socket: n.Socket})
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	n.mu.Lock()
	n.daemon = d
	n.mu.Unlock()
	return nil
}

// StartAll starts every node, without recovery.
func (l *Lab) StartAll(ctx context.Context) error {
	for _, n := range l.Nodes {
		if err := l.Start(ctx, n, false); err != nil {
			return err
		}
	}
	return nil
}

// Kill kills node n's daemon with SIGKILL, as a node dies. With a kernel
// table, the node's learned routes are flushed from it, as a reboot would:
// the returning node starts with an empty table.
func (l *Lab) Kill(n *Node) error {
	n.mu.Lock()
	d := n.daemon
	n.daemon = nil
	n.mu.Unlock()
	if d == nil {
		return nil
	}
	err := d.Kill()
	if n.Kernel {
		if out, ferr := exec.Command("ip", "-n", l.opts.NetNS, "route", "flush", "proto", "bird").CombinedOutput(); ferr != nil {
			err = errors.Join(err, fmt.Errorf("flush %s's kernel routes: %v: %s", n.Name, ferr, out))
		}
	}
	return err
}

// Freeze stops node n's daemon with SIGSTOP, as a node loses power (see
// birdproc.Daemon.Freeze); Kill or Close end it.
func (l *Lab) Freeze(n *Node) error {
	if d := n.Daemon(); d != nil {
		return d.Freeze()
	}
	return nil
}

// Close stops every daemon and deletes the network namespace.
func (l *Lab) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for _, n := range l.Nodes {
		n.mu.Lock()
		d := n.daemon
		n.daemon = nil
		n.mu.Unlock()
		if d != nil {
			if err := d.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop %s (pid %d): %w", n.Name, d.PID(), err))
			}
		}
	}
	if l.netns {
		if out, err := exec.Command("ip", "netns", "del", l.opts.NetNS).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", l.opts.NetNS, err, out))
		}
	}
	return errors.Join(errs...)
}

// HasRoute reports whether observer's BIRD has a route for p in its table.
func HasRoute(ctx context.Context, observer *Node, p netip.Prefix) (bool, error) {
	out, err := observer.Client().Query(ctx, "show route "+p.String())
	if err != nil {
		return false, err
	}
	// BIRD 1.6: "1007-198.18.0.0/26 via ..."; BIRD 2: "1007-Table master4:"
	// then continuation lines " 198.18.0.0/26 unreachable ...".
	code := ""
	for _, line := range strings.Split(out, "\n") {
		if len(line) >= 5 && line[0] >= '0' && line[0] <= '9' {
			code, line = line[:4], line[5:]
		}
		if code != "1007" {
			continue
		}
		if f := strings.Fields(line); len(f) > 0 && f[0] == p.String() {
			return true, nil
		}
	}
	return false, nil
}

// KernelRoutes lists the routes BIRD programmed into the namespace's main
// table (`ip -n NS route show proto bird`).
func (l *Lab) KernelRoutes() (string, error) {
	if !l.netns {
		return "", errors.New("birdlab: no network namespace, no kernel table")
	}
	out, err := exec.Command("ip", "-n", l.opts.NetNS, "route", "show", "proto", "bird").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip -n %s route show proto bird: %v: %s", l.opts.NetNS, err, out)
	}
	return string(out), nil
}

// KernelHasRoute reports whether the kernel table has a BIRD route for p.
func (l *Lab) KernelHasRoute(p netip.Prefix) (bool, error) {
	out, err := l.KernelRoutes()
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i, w := range f {
			if w == p.String() && (i == 0 || i == 1) {
				return true, nil
			}
		}
	}
	return false, nil
}

// Established reports whether n's sessions with every node in peers are
// Established.
func Established(ctx context.Context, n *Node, peers []*Node) (bool, string, error) {
	protos, err := n.Client().Protocols(ctx)
	if err != nil {
		return false, "", err
	}
	var missing []string
	for _, p := range peers {
		if _, ok := n.SessionWith(protos, p); !ok {
			missing = append(missing, p.Name)
		}
	}
	return len(missing) == 0, strings.Join(missing, ","), nil
}

// ProtocolNames are the names n's BIRD may give its session with the peer
// at addr (Options.ProtocolNames).
func (n *Node) ProtocolNames(addr netip.Addr) []string {
	if n.protocolNames != nil {
		return n.protocolNames(addr)
	}
	return []string{bird.ProtocolName(addr)}
}

// SessionWith finds, among n's protocols, its session with peer, and
// reports whether it is Established.
func (n *Node) SessionWith(protos []bird.Protocol, peer *Node) (bird.Protocol, bool) {
	names := n.ProtocolNames(peer.Address)
	var found bird.Protocol
	for _, p := range protos {
		for _, name := range names {
			if p.Name != name {
				continue
			}
			if p.Established() {
				return p, true
			}
			found = p
		}
	}
	return found, false
}

// Poll calls cond every interval until it returns true, ctx ends or
// timeout passes; the error carries cond's last explanation.
func Poll(ctx context.Context, interval, timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not true after %s: %s", what, timeout, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %s)", what, ctx.Err(), why)
		case <-time.After(interval):
		}
	}
}

// freePort returns a TCP port that was free on addr a moment ago (in the
// caller's namespace; in a fresh namespace every port is free). Never 179.
func freePort(addr netip.Addr, anyAddr bool) (uint16, error) {
	listen := addr
	if anyAddr {
		listen = netip.MustParseAddr("127.0.0.1")
	}
	for {
		l, err := net.Listen("tcp", netip.AddrPortFrom(listen, 0).String())
		if err != nil {
			return 0, fmt.Errorf("find a free port on %s: %w", listen, err)
		}
		port := uint16(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		if port != bird.DefaultBGPPort {
			return port, nil
		}
	}
}

// checkPort fails unless port is free on addr now (any port in a fresh
// namespace is).
func checkPort(addr netip.Addr, port uint16, inNetNS bool) error {
	if inNetNS {
		return nil
	}
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, port).String())
	if err != nil {
		return fmt.Errorf("birdlab: port %d on %s: %w", port, addr, err)
	}
	return l.Close()
}

// Others returns the nodes of all except self, in order.
func Others(all []*Node, self *Node) []*Node {
	var out []*Node
	for _, n := range all {
		if n != self {
			out = append(out, n)
		}
	}
	return out
}

// RoutesAt reports whether every observer has b's route, and if not, which
// one lacks it.
func RoutesAt(ctx context.Context, observers []*Node, b *Node) (bool, string) {
	for _, obs := range observers {
		if ok, err := HasRoute(ctx, obs, b.Route); !ok {
			return false, fmt.Sprintf("%s lacks %s (%v)", obs.Name, b.Route, err)
		}
	}
	return true, ""
}
