package scenario

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	mathrand "math/rand/v2"
	stdnet "net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"rebound/deploy"
	"rebound/internal/lab/hoststandin"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/watchdogstandin"
)

// GossipAgentOptions say which nodes of a sandbox run a gossiping agent.
type GossipAgentOptions struct {
	// Binary is the rebound binary to run as `rebound agent --gossip-only`.
	Binary string
	// Only, when set, are the nodes that run one; empty means all.
	Only []string
	// WrongKey are nodes whose agent holds another key than the others.
	WrongKey []string
	// OwnAPIPaths gives each agent its own path to the apiserver
	// (GossipAgent.API), which the lab cuts with its node's kubelet.
	OwnAPIPaths bool
	// ReportInterval, when set, is the agents' --report-interval: the
	// longest time between two writes of an unchanged gossip read. A
	// controller whose --peering-report-max-age is shorter than the
	// product's needs it at a third of that age, the product's ratio,
	// or an unchanged read of a live node ages out.
	ReportInterval time.Duration
	// Fencing runs every agent with watchdog self-fencing at the
	// product's default timing (W, T): its watchdog is the lab's stand-in
	// (GossipAgent.Watchdog), which resets the node when not fed, and its
	// boot is numbered by the lab (GossipAgent.BootID). The agents'
	// fencing reads (deploy/fencing) are installed with their
	// confinement.
	Fencing bool
}

// GossipAgent is one `rebound agent --gossip-only` process, and the
// stand-in of its node's host (Host).
type GossipAgent struct {
	Node, Address, Log string
	// KeyFile is the agent's --gossip-key-file: rewrite it (WriteGossipKeys)
	// and the agent reloads its keyring.
	KeyFile string
	// Host answers for the node's kernel at its kubelet port.
	Host *hoststandin.Host
	// API is the agent's own path to the apiserver, when it has one
	// (GossipAgentOptions.OwnAPIPaths): cut it and the agent no longer
	// reaches the API, while its gossip goes on.
	API *sandbox.APIPath
	// CutFile names the addresses whose links to this agent the lab has
	// cut (Partition), with GossipAgentOptions.Fencing.
	CutFile string
	// Watchdog is the node's watchdog stand-in, with
	// GossipAgentOptions.Fencing: not fed for W, it resets the node
	// (Reset).
	Watchdog *watchdogstandin.Socket

	binary string
	args   []string
	cmd    *exec.Cmd
	done   chan struct{}

	c     *sandbox.Cluster
	mu    sync.Mutex
	boot  int
	reset []time.Time
	ch    chan struct{} // closed and replaced at each reset
}

// BootID is the node's boot as the lab numbers it: a reset and the
// return after it (Return) make a new one.
func (a *GossipAgent) BootID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("lab-%s-boot-%d", a.Node, a.boot)
}

// Resets returns when the node's watchdog stand-in reset it, as the API
// dates it (the creationTimestamp of the Event the lab wrote then).
func (a *GossipAgent) Resets() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.reset)
}

// ResetSignal is closed at the node's next reset.
func (a *GossipAgent) ResetSignal() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ch
}

// watchdogReset is the node's reset by its watchdog: its kubelet's
// heartbeats stop, its host goes silent, its agent dies at once. It
// stays down until Return.
func (a *GossipAgent) watchdogReset() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.c.StopNode(ctx, a.Node)
	_ = a.Host.Silence()
	_ = a.Kill()
	at, err := markEvent(ctx, a.c, a.Node, "LabWatchdogReset", "the lab: the node's watchdog was not fed for its timeout and reset it (heartbeats stop, host silent, agent killed)")
	if err != nil {
		at = time.Now()
	}
	a.mu.Lock()
	a.reset = append(a.reset, at)
	close(a.ch)
	a.ch = make(chan struct{})
	a.mu.Unlock()
}

// Return brings the node back on a new boot, after a reset or a host
// death: a new boot ID on its Node, its kubelet's heartbeats, its host,
// and its agent started afresh (its watchdog a fresh device).
func (a *GossipAgent) Return(ctx context.Context) error {
	select {
	case <-a.done:
	default:
		if err := a.Kill(); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.boot++
	a.mu.Unlock()
	if err := setBootID(ctx, a.c, a.Node, a.BootID()); err != nil {
		return err
	}
	if a.Watchdog != nil {
		a.Watchdog.Rearm()
	}
	if err := a.Host.Revive(); err != nil {
		return err
	}
	if err := a.c.StartNode(ctx, a.Node); err != nil {
		return err
	}
	return a.start()
}

// setBootID writes the node's boot ID into its status, as a kubelet does
// at start; kwok keeps what it finds there.
func setBootID(ctx context.Context, c *sandbox.Cluster, node, id string) error {
	patch := fmt.Appendf(nil, `{"status":{"nodeInfo":{"bootID":%q}}}`, id)
	if _, err := c.Client.CoreV1().Nodes().PatchStatus(ctx, node, patch); err != nil {
		return fmt.Errorf("set the boot ID of %s: %w", node, err)
	}
	return nil
}

// start runs the agent, its output appended to Log.
func (a *GossipAgent) start() error {
	f, err := os.OpenFile(a.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := a.args
	if a.Watchdog != nil {
		args = append(slices.Clone(args), "--lab-watchdog-socket", a.Watchdog.Path(), "--lab-boot-id", a.BootID())
	}
	cmd := exec.Command(a.binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start the agent of %s: %w", a.Node, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	a.cmd, a.done = cmd, done
	return nil
}

// Restart starts the agent again after Kill or Stop, with the same
// flags and token, as a DaemonSet's pod starts again on its node.
func (a *GossipAgent) Restart() error {
	select {
	case <-a.done:
	default:
		return fmt.Errorf("the agent of %s still runs", a.Node)
	}
	return a.start()
}

// Kill kills the agent at once (SIGKILL): to the other members it is a
// node whose network went away, no goodbye.
func (a *GossipAgent) Kill() error {
	if err := a.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-a.done
	return nil
}

// Freeze stops the agent where it is (SIGSTOP): its sockets stay open
// and nothing answers on them, as on a machine that lost power.
func (a *GossipAgent) Freeze() error { return a.signal(syscall.SIGSTOP) }

// Thaw lets a frozen agent run again (SIGCONT).
func (a *GossipAgent) Thaw() error { return a.signal(syscall.SIGCONT) }

func (a *GossipAgent) signal(sig syscall.Signal) error {
	if err := a.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to the agent of %s: %w", sig, a.Node, err)
	}
	return nil
}

// CutAPI cuts the agent's own path to the apiserver (it needs
// GossipAgentOptions.OwnAPIPaths); its gossip goes on.
func (a *GossipAgent) CutAPI() error {
	if a.API == nil {
		return fmt.Errorf("the agent of %s has no API path of its own to cut", a.Node)
	}
	a.API.Cut()
	return nil
}

// RestoreAPI ends CutAPI.
func (a *GossipAgent) RestoreAPI() error {
	if a.API == nil {
		return fmt.Errorf("the agent of %s has no API path of its own to restore", a.Node)
	}
	a.API.Restore()
	return nil
}

// HostDeath is the node's machine dying: its host drops every packet
// (never refusing) and its agent freezes, its gossip unanswered. The
// Lease is the caller's (c.StopNode), as the kubelet is the sandbox's.
func (a *GossipAgent) HostDeath() error {
	if err := a.Host.Silence(); err != nil {
		return err
	}
	return a.Freeze()
}

// HostRevive undoes HostDeath: the host answers, the agent runs on.
func (a *GossipAgent) HostRevive() error {
	if err := a.Host.Revive(); err != nil {
		return err
	}
	return a.Thaw()
}

// Stop ends the agent gracefully (SIGTERM, SIGKILL after 15 s); a frozen
// agent is thawed first, or it could not leave.
func (a *GossipAgent) Stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = a.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		_ = a.Kill()
	}
}

// gossipNet numbers each sandbox's loopback network, so that agents of
// sandboxes run side by side gossip apart: 127.13.<n>.<i+1>. It starts
// at a random network, and freeGossipNet skips networks in use, because
// test processes run side by side too.
var gossipNet atomic.Int32

func init() { gossipNet.Store(int32(mathrand.IntN(150))) }

// freeGossipNet returns a network whose first n addresses have the gossip
// port free (TCP and UDP), as far as a bind can tell now.
func freeGossipNet(n int) (int, error) {
	for range 150 {
		net := 100 + int(gossipNet.Add(1)%150)
		if gossipNetFree(net, n) {
			return net, nil
		}
	}
	return 0, fmt.Errorf("no free network 127.13.x.0/24 for %d gossip agents on port %d", n, GossipPort)
}

func gossipNetFree(network, n int) bool {
	for i := range n {
		a := fmt.Sprintf("127.13.%d.%d:%d", network, i+1, GossipPort)
		l, err := stdnet.Listen("tcp", a)
		if err != nil {
			return false
		}
		l.Close()
		u, err := stdnet.ListenPacket("udp", a)
		if err != nil {
			return false
		}
		u.Close()
	}
	return true
}

// GossipPort is the port the sandbox's agents gossip on, each on its own
// loopback address.
const GossipPort = 7946

// GossipService is the name of the Service whose EndpointSlices list the
// members (the agents' --gossip-service), and GossipNamespace their
// namespace.
const (
	GossipService   = "rebound-gossip"
	GossipNamespace = "rebound-agent"
)

// GossipKeyReloadInterval is how often the lab's agents re-read their
// key file: a rotation step takes effect within it.
const GossipKeyReloadInterval = time.Second

// StartGossipAgents installs the members' confinement (deploy/gossip) on
// c (the node-bound tokens need it), opens a host stand-in per node
// (StartHosts), writes the EndpointSlice that lists the members as the
// Service's controller would, and starts one gossip-only agent per node,
// as the ServiceAccount of deploy/gossip's DaemonSet, each on its own
// loopback address with a token bound to its node, all joining each
// other, with a random key in its own key file in c.Dir
// (GossipAgent.KeyFile). Stop them with StopAll.
func StartGossipAgents(ctx context.Context, c *sandbox.Cluster, opts GossipAgentOptions) (map[string]*GossipAgent, error) {
	if err := InstallGossipConfinement(ctx, c, "rebound-gossip"); err != nil {
		return nil, err
	}
	if opts.Fencing {
		if err := installFencingReads(ctx, c); err != nil {
			return nil, err
		}
	}
	good, err := NewGossipKey()
	if err != nil {
		return nil, err
	}
	wrong, err := NewGossipKey()
	if err != nil {
		return nil, err
	}
	nodes := opts.Only
	if len(nodes) == 0 {
		nodes = c.NodeNames
	}
	net, err := freeGossipNet(len(nodes))
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return fmt.Sprintf("127.13.%d.%d", net, i+1) }
	var join []string
	for i := range nodes {
		join = append(join, fmt.Sprintf("%s:%d", addr(i), GossipPort))
	}
	hosts, err := StartHosts(ctx, c, nodes)
	if err != nil {
		return nil, err
	}
	members := map[string]string{}
	for i, n := range nodes {
		members[n] = addr(i)
	}
	if err := writeGossipEndpoints(ctx, c, members); err != nil {
		for _, h := range hosts {
			h.Close()
		}
		return nil, err
	}
	agents := map[string]*GossipAgent{}
	for _, n := range nodes {
		agents[n] = &GossipAgent{Node: n, Host: hosts[n], c: c, boot: 1, ch: make(chan struct{})}
	}
	for i, n := range nodes {
		token, err := GossipToken(ctx, c, n)
		if err != nil {
			StopAll(agents)
			return nil, err
		}
		kubeconfig := filepath.Join(c.Dir, "agent-"+n+".kubeconfig")
		server := c.Config.Host
		if opts.OwnAPIPaths {
			if agents[n].API, err = c.OpenAPIPath(); err != nil {
				StopAll(agents)
				return nil, err
			}
			server = agents[n].API.URL()
		}
		if err := writeTokenKubeconfig(c, server, token, kubeconfig); err != nil {
			StopAll(agents)
			return nil, err
		}
		// A key file per agent, as each node mounts its own copy of the
		// Secret: a rotation reaches them one by one.
		key := filepath.Join(c.Dir, "gossip-"+n+".key")
		k := good
		if slices.Contains(opts.WrongKey, n) {
			k = wrong
		}
		if err := WriteGossipKeys(key, k); err != nil {
			StopAll(agents)
			return nil, err
		}
		a := agents[n]
		a.Address, a.KeyFile, a.Log, a.binary = addr(i), key, filepath.Join(c.Dir, "logs", "rebound-agent-"+n+".log"), opts.Binary
		cmd := []string{"agent"}
		if opts.Fencing {
			if err := setBootID(ctx, c, n, a.BootID()); err != nil {
				StopAll(agents)
				return nil, err
			}
			if a.Watchdog, err = watchdogstandin.Listen(filepath.Join(c.Dir, "watchdog-"+n+".sock"), clock.RealClock{}, a.watchdogReset); err != nil {
				StopAll(agents)
				return nil, err
			}
			a.CutFile = filepath.Join(c.Dir, "cut-"+n)
			cmd = []string{"sandbox", "agent", "--fencing-state", filepath.Join(c.Dir, "fencing-"+n+".json"), "--lab-cut-file", a.CutFile}
		}
		a.args = append(cmd, "--gossip-only", "--node-name", n, "--kubeconfig", kubeconfig,
			"--gossip-key-file", key, "--gossip-key-reload-interval", GossipKeyReloadInterval.String(),
			"--gossip-namespace", GossipNamespace, "--gossip-service", GossipService,
			"--gossip-bind-address", addr(i), "--gossip-port", fmt.Sprint(GossipPort),
			"--gossip-join", strings.Join(join, ","), "--health-addr", "", "--metrics-bind-address", "0")
		if opts.ReportInterval > 0 {
			a.args = append(a.args, "--report-interval", opts.ReportInterval.String())
		}
		if err := a.start(); err != nil {
			StopAll(agents)
			return nil, err
		}
	}
	return agents, nil
}

// StopAll stops every agent that runs and closes every host stand-in and
// API path.
func StopAll(agents map[string]*GossipAgent) {
	for _, a := range agents {
		if a.cmd != nil {
			a.Stop()
		}
		if a.Host != nil {
			a.Host.Close()
		}
		if a.API != nil {
			a.API.Close()
		}
		if a.Watchdog != nil {
			a.Watchdog.Close()
		}
	}
}

// writeGossipEndpoints writes the EndpointSlice of GossipService: one
// endpoint per member, its address and nodeName, and the gossip ports, as
// the EndpointSlice controller writes them for deploy/gossip's Service.
// The agents read their address book from it.
//
// Its address type is FQDN, each address an IPv4 literal: the apiserver
// refuses loopback addresses in an IPv4 slice, and the lab's members are
// on loopback. The agents' address book must take an FQDN slice whose
// address parses as an IP as it takes an IPv4 one.
func writeGossipEndpoints(ctx context.Context, c *sandbox.Cluster, members map[string]string) error {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: GossipNamespace, Name: GossipService + "-lab", Labels: map[string]string{
			discoveryv1.LabelServiceName: GossipService,
			// Not the EndpointSlice controller's: it leaves the slice alone.
			discoveryv1.LabelManagedBy: "lab.rebound.dev",
		}},
		AddressType: discoveryv1.AddressTypeFQDN,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("gossip-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](GossipPort)},
			{Name: ptr.To("gossip-udp"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](GossipPort)},
		},
	}
	nodes := slices.Sorted(maps.Keys(members))
	for _, n := range nodes {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{members[n]},
			NodeName:   ptr.To(n),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(GossipNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("write the gossip members' EndpointSlice %s/%s: %w", GossipNamespace, slice.Name, err)
	}
	return nil
}

// WriteGossipKeys replaces path's keys (base64, the primary first) with
// keys, atomically: an agent never reads half a file.
func WriteGossipKeys(path string, keys ...string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// NewGossipKey is a random key, base64 as a key file holds it.
func NewGossipKey() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(key), nil
}

// installFencingReads installs what watchdog self-fencing adds to the
// gossip members' confinement (deploy/fencing): reads of their own
// Lease, of the reports, and of the fencing document.
func installFencingReads(ctx context.Context, c *sandbox.Cluster) error {
	cl, err := install.NewClient(c.Config)
	if err != nil {
		return err
	}
	_, err = install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-gossip"}, deploy.FencingRBAC)
	return err
}

// markEvent writes an Event about node and returns its creation time: the
// API's date of what the lab did in that instant.
func markEvent(ctx context.Context, c *sandbox.Cluster, node, reason, message string) (time.Time, error) {
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "lab-" + strings.ToLower(node) + "-", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, APIVersion: "v1"},
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "rebound-lab"},
	}
	got, err := c.Client.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("record %s of %s: %w", reason, node, err)
	}
	return got.CreationTimestamp.Time, nil
}
