// Package agentcmd is the `agent` command, shared by rebound (run it by
// hand, with a kubeconfig) and rebound-manager (the image's DaemonSet).
package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"rebound/internal/agent"
	"rebound/internal/agent/feeder"
	"rebound/internal/agent/gossip"
	"rebound/internal/cli"
	"rebound/internal/logging"
	"rebound/internal/metricsserving"
	"rebound/pkg/fencing"
	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
	"rebound/pkg/unreachable"
)

// NewCommand returns `agent`.
func NewCommand() *cobra.Command { return NewLabCommand(LabHooks{}) }

// LabHooks let the lab run the same agent command with its stand-ins for
// what a kwok node lacks (its watchdog, its boot ID): `rebound sandbox
// agent`. The product's commands have none.
type LabHooks struct {
	// Flags adds the lab's flags.
	Flags func(*pflag.FlagSet)
	// Configure sets what the lab stands in for, once the flags are
	// parsed and before anything is validated.
	Configure func(*agent.Options) error
}

// NewLabCommand returns `agent` with the lab's hooks.
func NewLabCommand(hooks LabHooks) *cobra.Command {
	var (
		opts       agent.Options
		kube       *cli.KubeFlags
		logFlags   *logging.Flags
		address    string
		version    string
		as         uint32
		listenPort uint16
		healthAddr string
		metrics    metricsserving.Config
		peerSet    string
		gossipBind string
		fencingDoc string
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Keep this node's BIRD peered with the health-aware peer set, and report its BGP sessions",
		Long: `rebound agent runs on every node, beside BIRD (a DaemonSet, see deploy/agent).

It watches the peer set the controller publishes (one ConfigMap, --peer-set:
nodes NotReady past their grace period are left out), renders this node's full
mesh among its members into a BIRD include file, writes it atomically and runs
BIRD's "configure". It never applies an empty set, nor one smaller than the
floor published with it: it keeps the last good file and says why. A returning node's BIRD, started in graceful-restart
recovery (bird -R, as calico-node does), then waits only for live peers instead
of the 240 s "graceful restart wait" a dead peer costs (Calico issue, seed 003).

BIRD's main configuration must include the file, after everything else:

  include "/etc/bird/rebound/mesh.conf";

and define the filters named by --import-filter/--export-filter, if any.

Safety: a configuration BIRD rejects, or cannot load because it is not
running, is replaced by the last one it accepted, and the reload is retried
with backoff; unchanged configuration is never reloaded; bursts of changes
are debounced. With --bird-binary and --bird-config, a file written while
BIRD is down that passes BIRD's own parser (bird -p) stays for BIRD's start.

BIRD 1.6 ends its graceful-restart recovery when a reload removes the dead
peers. BIRD 2 (2.0.12, measured) does not: it keeps waiting for a protocol
removed or disabled during recovery. With BIRD 2, make sure the set is in
place before BIRD starts: run "rebound agent --once" first (init container,
ExecStartPre), or start the agent before BIRD with --bird-binary/--bird-config.

The agent reports its sessions (birdc show protocols, with each session's
last state change) in the PeeringReport named after its node; its credential
may write no other (deploy/agent: RBAC and a ValidatingAdmissionPolicy on the
node name bound into its token). The controller keeps a NotReady node in the
set while a live peer's fresh report shows a session with it re-established
after it went NotReady (or BFD up).

--once is bounded by --once-timeout: when the API server does not answer in
time, or the set is refused, the last good file stays and the agent exits 0
(BIRD starts with the set it had), or fails when there is no file at all.

--rejoin-only is the Calico backend's agent (deploy/calico): no BIRD, no
reports. Calico's BGPPeer meshes every node not labelled
peering.rebound.dev/in-set=false, so only the controller's "false" can keep a
node out; when this node is Ready again with a BGP address and still labelled
"false" (the controller is down), the agent sets it to "true" at once, as the
controller would. Its credential may do exactly that to its own node and
nothing else (a ValidatingAdmissionPolicy on the node name bound into its
token): it can put its own node back, never take a node out.

Gossip (--gossip-key-file): the agents also form a SWIM membership among
themselves (hashicorp/memberlist, as MetalLB's speakers do) on
--gossip-bind-address:--gossip-port, UDP and TCP. Each agent watches the
--gossip-watchers members that precede it on a hash ring of the members, and
writes what its OWN probes say of them into its PeeringReport's gossip field,
under its own field manager: on a change, and every --report-interval.
Addresses come from the API, never from the gossip: each member's from the
EndpointSlices of --gossip-service in --gossip-namespace (nodeName -> pod
address), each host's from its Node (InternalIP and the kubelet's port). A
member the API does not list, or that announces another address, is refused.
When the membership says a watched member is dead or gone, the agent pings it
at the API's address; if it stays silent, it dials the kubelet's port at the
Node's address: accepted or refused is a live kernel (MemberDown: no vote, a
rollout or a crash of the member); only silence is Dead. No address in the
API, no probe and no vote. The controller counts a death when a quorum of a
node's watchers say Dead, none says Alive, and the node's Lease is stale.
Every message is encrypted and authenticated with the keyring in
--gossip-key-file (one base64 key a line, the first encrypts): an agent
without a key cannot join, nor speak of anyone. A key holder can, which is why
votes rest on probes to the API's addresses and not on membership state.
--gossip-watchers must be the controller's
--gossip-watchers (3 unless set; the chart's gossip.watchers sets both): each
agent writes its own in its report, and the controller logs every agent whose
number differs and counts them (rebound_gossip_watchers_mismatched_agents),
since their votes are then not all heard. MetalLB's speakers default to port
7946 too: where both run on the host network, give one of them another port.

--gossip-only runs only the gossip member and its writer: no BIRD, no peer
set, and none of the BIRD flags is needed (a Calico cluster, or BIRD run by
something else).

A gossiping agent also takes rebound's taint rebound.dev/unreachable:NoSchedule
off its own node when no controller does (the controller scaled to 0,
crashlooping or uninstalled): once its node is Ready and it has seen the node's
Lease renewed with the taint on, and the taint is still there --untaint-after
later (10 s; on the agent's own clock) with the Lease still renewing. That is
the controller's own rule (a mark comes off a Ready node that is not dead), and
"renewing" is the controller's staleness rule (the renew interval plus the
default --lease-margin, 2 s), not the Lease's whole duration.
It watches its Node and its Lease in kube-node-lease, and its credential may
make that one change to its own Node and nothing else (deploy/gossip: RBAC and
a ValidatingAdmissionPolicy on the node name bound into its token).
--untaint-after=0 turns it off.

Watchdog self-fencing (--watchdog-device, beside the gossip; docs/fencing.md):
the agent opens the node's watchdog, checks that it can fence (magic close,
the timeout read back, a reset or panic), reports itself armed in its
PeeringReport, and feeds the watchdog only while sanctioned: while it sees its
node's Lease renewed by quorum reads, or a strict majority of the published
member list answers its own signed probes (--fencing-port, UDP) within
--sanction-window. A node cut off from both resets within T + 2W, which is what
lets the controller, under a policy with fencing.mode Watchdog, put
node.kubernetes.io/out-of-service on it itself. SIGTERM disarms the watchdog
while sanctioned, once a disarmed report reads back; any other stop (SIGKILL,
a crash, a SIGTERM while cut off) leaves it armed, and the node resets.

Probes on --health-addr (plain HTTP, for the kubelet; :9810 by default, :9813
with --gossip-only, :9812 with --rejoin-only, so that agents sharing a host's
network never collide):
  /readyz  ready when every peer IN THE SET is Established, or the agent has
           been up for --ready-after; peers outside the set never hold it back
  /healthz the work loop is alive

Metrics on --metrics-bind-address (:9811 by default, :9814 with --gossip-only):
HTTPS, and every scrape needs a token that the API server authenticates and
RBAC allows to get /metrics (ClusterRole rebound-metrics-reader), as the
controller's; the agent's credential checks them (TokenReview,
SubjectAccessReview: ClusterRole rebound-metrics-auth). When a port is taken,
the error names the flag to change.`,
		Example: `  # Calico: put this node back into the set when it is Ready (deploy/calico)
  rebound agent --rejoin-only --node-name=$NODE_NAME

  # Gossip only, joining through the members' headless Service (deploy/gossip,
  # chart gossip.enabled); the key from a Secret
  #   kubectl -n rebound-agent create secret generic rebound-gossip-key \
  #     --from-literal=key="$(openssl rand -base64 32)"
  rebound agent --gossip-only --node-name=$NODE_NAME \
    --gossip-key-file /etc/rebound/gossip/key \
    --gossip-join rebound-gossip.rebound-agent.svc:7946

  # BIRD and gossip in one agent, on the node's BGP address
  rebound agent --node-name=$NODE_NAME --as 64512 \
    --bird-socket /run/bird/bird.ctl --mesh-file /etc/bird/rebound/mesh.conf \
    --gossip-key-file /etc/rebound/gossip/key --gossip-join 10.0.0.11,10.0.0.12:7946

  # BIRD 1.6 on the host (deploy/agent)
  rebound agent --node-name=$NODE_NAME --as 64512 \
    --bird-socket /run/bird/bird.ctl --mesh-file /etc/bird/rebound/mesh.conf

  # BIRD 2: before BIRD starts, write the current set once ...
  rebound agent --once --node-name=$NODE_NAME --as 64512 --bird-version 2 \
    --bird-socket /run/bird/bird.ctl --mesh-file /etc/bird/rebound/mesh.conf \
    --bird-binary /usr/sbin/bird --bird-config /etc/bird/bird.conf
  # ... then keep it current; graceful-restart wait 60 s, peers keep routes 120 s
  rebound agent --node-name=$NODE_NAME --as 64512 --bird-version 2 \
    --bird-socket /run/bird/bird.ctl --mesh-file /etc/bird/rebound/mesh.conf \
    --bird-binary /usr/sbin/bird --bird-config /etc/bird/bird.conf \
    --graceful-restart-time 120 --graceful-restart-wait 60`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hooks.Configure != nil {
				if err := hooks.Configure(&opts); err != nil {
					return err
				}
			}
			opts.Version = bird.Version(version)
			opts.AS = as
			opts.ListenPort = listenPort
			if address != "" {
				a, err := netip.ParseAddr(address)
				if err != nil {
					return fmt.Errorf("--address %q: %w", address, err)
				}
				opts.Address = a
			}
			if gossipBind != "" {
				a, err := netip.ParseAddr(gossipBind)
				if err != nil {
					return fmt.Errorf("--gossip-bind-address %q: want an IP address, this node's own: %w", gossipBind, err)
				}
				opts.Gossip.BindAddress = a
			}
			logger, _, err := logFlags.Setup(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			opts.Logger = logger

			health, metricsAddr := listenAddrs(cmd.Flags(), opts, healthAddr, metrics.Addr)
			healthAddr, metrics.Addr = health, metricsAddr
			if err := errors.Join(opts.WithDefaults().ValidateFlags(), cli.ValidateGossipWatchers(opts.Gossip.Watchers), agent.CheckListen(opts, healthAddr, metrics.Addr)); err != nil {
				return fmt.Errorf("rebound agent: %w", err)
			}
			cfg, err := kube.RESTConfig("rebound-agent/" + opts.NodeName)
			if err != nil {
				return err
			}
			if opts.Client, err = kubernetes.NewForConfig(cfg); err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			opts.Reports = agent.APIReportWriter{Client: dyn}
			opts.Gossip.Reports = gossip.APIWriter{Client: dyn, Node: opts.NodeName}
			ns, name, ok := strings.Cut(peerSet, "/")
			if !ok || ns == "" || name == "" {
				return fmt.Errorf("--peer-set %q: want NAMESPACE/NAME, e.g. %s/%s", peerSet, peering.DefaultPeerSetNamespace, peering.DefaultPeerSetName)
			}
			opts.PeerSet = types.NamespacedName{Namespace: ns, Name: name}
			if opts.Fencing.Device != "" || opts.Fencing.Open != nil {
				ns, name, ok := strings.Cut(fencingDoc, "/")
				if !ok || ns == "" || name == "" {
					return fmt.Errorf("--fencing-document %q: want NAMESPACE/NAME, e.g. %s/%s", fencingDoc, peering.DefaultPeerSetNamespace, agent.DefaultFencingDocumentName)
				}
				opts.Fencing.Document = types.NamespacedName{Namespace: ns, Name: name}
				opts.Fencing.Leases = feeder.APILeases{Client: opts.Client, Node: opts.NodeName}
				opts.Fencing.Reports = feeder.APIReports{Client: dyn, Node: opts.NodeName}
			}
			a, err := agent.New(opts)
			if err != nil {
				return err
			}
			var ms metricsserver.Server
			if !opts.Once && !opts.RejoinOnly {
				if ms, err = metricsServer(metrics, cfg, a, opts); err != nil {
					return err
				}
			}
			return serveAgent(cmd.Context(), a, healthAddr, ms, metrics.Addr)
		},
	}
	f := cmd.Flags()
	kube = cli.AddKubeFlags(cmd, cli.Omit{Namespace: true, Impersonation: true})
	logFlags = logging.AddFlags(cmd)
	f.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	f.StringVar(&version, "bird-version", string(bird.Bird16), "BIRD configuration syntax: 1.6 (calico-node's BIRD) or 2")
	f.StringVar(&opts.MeshPath, "mesh-file", "", "absolute path of the include file to write; BIRD's configuration must include it last")
	f.StringVar(&opts.Socket, "bird-socket", "", "BIRD's control socket (bird -s), e.g. /var/run/calico/bird.ctl")
	f.StringVar(&opts.BirdBinary, "bird-binary", "", "BIRD daemon binary; with --bird-config, a file written while BIRD is down is checked with bird -p and left in place for BIRD's start")
	f.StringVar(&opts.BirdConfig, "bird-config", "", "BIRD's main configuration (the one that includes --mesh-file), for the --bird-binary check")
	f.StringVar(&peerSet, "peer-set", peering.DefaultPeerSetNamespace+"/"+peering.DefaultPeerSetName, "NAMESPACE/NAME of the ConfigMap the controller publishes the peer set in")
	f.DurationVar(&opts.OnceTimeout, "once-timeout", agent.DefaultOnceTimeout, "with --once: give up after this long, keeping the last good file")
	f.BoolVar(&opts.RejoinOnly, "rejoin-only", false, "no BIRD: only watch this node and, when it is Ready with a BGP address but labelled "+peering.LabelInSet+"=false, put it back (=true) into the Calico peer set, so that a returning node rejoins the mesh while the controller is down (deploy/calico's DaemonSet); the BIRD flags are ignored")
	f.BoolVar(&opts.Once, "once", false, "apply the peer set once and exit: run before BIRD starts (init container, ExecStartPre) so BIRD starts with the current set")
	f.StringVar(&opts.Birdc, "birdc", "", "run this birdc binary (birdc -s SOCKET configure) instead of speaking the socket protocol directly")
	f.Uint32Var(&as, "as", 0, "local AS number of the mesh (Calico's default is 64512)")
	f.StringVar(&address, "address", "", "this node's BGP address; default: its Node's projectcalico.org/IPv4Address, else its InternalIP")
	f.Uint16Var(&listenPort, "listen-port", 0, "listen for BGP on --address and this port only, and report it: the controller publishes it as this node's port, so peers dial it (a node's peering.rebound.dev/bgp-port annotation overrides it); 0 keeps BIRD's default, port 179 on every address, which is also the controller's --bgp-port default")
	f.IntVar(&opts.GracefulRestartTime, "graceful-restart-time", bird.DefaultGracefulRestartTime, "seconds peers keep this node's routes while it restarts (BIRD's per-peer graceful restart time, Calico's nodeMeshMaxRestartTime)")
	f.IntVar(&opts.GracefulRestartWait, "graceful-restart-wait", bird.DefaultGracefulRestartWait, "longest time BIRD in graceful-restart recovery (bird -R) waits for peers before it programs routes (BIRD's global graceful restart wait)")
	f.BoolVar(&opts.BFD, "bfd", true, "run BFD with every peer (bfd graceful): a dead peer's session drops in --bfd-interval x --bfd-multiplier instead of the BGP hold time (240 s), and the controller's prune grace counts from that moment; peers without BFD are unaffected")
	f.DurationVar(&opts.BFDInterval, "bfd-interval", bird.DefaultBFDInterval, "BFD transmit and receive interval, whole milliseconds, 10ms..10s")
	f.IntVar(&opts.BFDMultiplier, "bfd-multiplier", bird.DefaultBFDMultiplier, "BFD intervals without a packet before a peer is down, 1..255")
	f.StringVar(&opts.ImportFilter, "import-filter", "", "BIRD filter for routes from peers (Calico: calico_import_from_bgp_peers); empty means all")
	f.StringVar(&opts.ExportFilter, "export-filter", "", "BIRD filter for routes to peers (Calico: calico_export_to_bgp_peers); empty means all")
	f.DurationVar(&opts.Debounce, "debounce", agent.DefaultDebounce, "collect changes of the peer set this long before one reload")
	f.DurationVar(&opts.RetryInterval, "retry-interval", agent.DefaultRetryInterval, "first wait after a failed reload; doubles up to --max-retry-interval")
	f.DurationVar(&opts.MaxRetryInterval, "max-retry-interval", agent.DefaultMaxRetryInterval, "longest wait between reload attempts")
	f.DurationVar(&opts.StatusInterval, "status-interval", agent.DefaultStatusInterval, "how often to read BIRD's sessions (show protocols)")
	f.DurationVar(&opts.ReportInterval, "report-interval", agent.DefaultReportInterval, "refresh the session report at least this often; keep it well below the controller's --peering-report-max-age")
	f.DurationVar(&opts.ReadyAfter, "ready-after", agent.DefaultReadyAfter, "report ready after this long up even if peers in the set are not Established")
	f.StringVar(&opts.Gossip.KeyFile, "gossip-key-file", "", "enable gossip: the file holding the cluster's gossip keyring, one base64 AES key of 16, 24 or 32 bytes per line (openssl rand -base64 32); the first encrypts, every one decrypts. Re-read every --gossip-key-reload-interval: rotate a key by writing \"old\\nnew\" everywhere, then \"new\\nold\", then \"new\" (docs/install.md)")
	f.DurationVar(&opts.Gossip.KeyReloadInterval, "gossip-key-reload-interval", gossip.DefaultKeyReloadInterval, "how often --gossip-key-file is read again and its keys applied to the running keyring; wait this plus the kubelet's Secret sync (up to about a minute) between two steps of a key rotation")
	f.StringVar(&opts.Gossip.Service, "gossip-service", agent.DefaultGossipService, "the gossip members' Service: its EndpointSlices (label kubernetes.io/service-name) give each node's member address (an endpoint's nodeName and address, the slice's gossip-udp port else --gossip-port). A member the API does not list there, or that announces another address, is refused; probes go only to the API's addresses, and a silent member's host is probed at its Node's InternalIP and kubelet port")
	f.StringVar(&opts.Gossip.Namespace, "gossip-namespace", "", "the namespace of --gossip-service; default: $POD_NAMESPACE (the downward API), else "+agent.DefaultGossipNamespace)
	f.StringVar(&gossipBind, "gossip-bind-address", "", "address to gossip on, this node's own (the other agents dial it); default: --address, else the node's BGP address as for BIRD")
	f.IntVar(&opts.Gossip.Port, "gossip-port", gossip.DefaultPort, "gossip UDP and TCP port, the same on every agent (MetalLB's speakers default to 7946 too)")
	f.StringSliceVar(&opts.Gossip.Join, "gossip-join", nil, "comma-separated members to join through: host:port, or host for --gossip-port; a DNS name, such as the agents' headless Service, stands for the addresses it resolves to, a few of which are tried at random. Retried with backoff until another member answers, and again whenever this one is left alone")
	cli.AddGossipWatchersFlag(f, &opts.Gossip.Watchers)
	f.DurationVar(&opts.Gossip.ProbeInterval, "gossip-probe-interval", gossip.DefaultProbeInterval, "how often each member probes another; a probe times out in half of it. A dead member is voted dead 7 to 12 intervals after its death (3.5 to 6 s at 500ms, measured with 5 to 200 members); raise it only where round trips between nodes approach 100 ms")
	f.DurationVar(&opts.Gossip.LeaseMargin, "lease-margin", liveness.DefaultLeaseMargin, "with gossip: how long past its renew interval (a quarter of its duration) a node's Lease may go unrenewed, on this agent's clock, before the node counts as lost; while this node's own Lease renews, the agent then may witness it: probe it at the API's addresses and report what it found within seconds. The controller's --lease-margin (chart value gossip.leaseMargin sets both)")
	f.DurationVar(&opts.UntaintAfter, "untaint-after", agent.DefaultUntaintAfter, "with gossip: take rebound's taint "+unreachable.TaintKey+" off this node when it is still there this long after the node's Lease was seen renewing (no controller took it off); 0 turns it off")
	f.StringVar(&opts.Fencing.Device, "watchdog-device", "", "enable watchdog self-fencing (docs/fencing.md; needs --gossip-key-file): arm this watchdog device, e.g. /dev/watchdog0, and feed it only while sanctioned (this node's Lease seen renewed by quorum reads, or a strict majority of the member list answering this agent's own probes within --sanction-window). The device must support the magic close, keep the timeout set, and reset or panic (softdog: not soft_noboot; hardlockup_panic=1). A policy with fencing.mode Watchdog then lets the controller fence this node itself. An agent killed without a graceful stop resets its node")
	f.DurationVar(&opts.Fencing.Timing.Watchdog, "watchdog-timeout", fencing.DefaultWatchdogTimeout, "W: the watchdog's timeout, whole seconds; the node resets at most this long after its last keepalive")
	f.DurationVar(&opts.Fencing.Timing.Sanction, "sanction-window", fencing.DefaultSanctionWindow, "T: how long one proof of being wanted lets the agent feed; at least the kubelet's 10s renew interval plus two Lease polls of 2s (validated). The controller fences a dead node no sooner than T + 2W + 3s after its own read of the node's Lease")
	f.IntVar(&opts.Fencing.Port, "fencing-port", agent.DefaultFencingPort, "UDP port of the agents' signed fencing probes, the same on every agent, on the gossip address")
	f.StringVar(&opts.Fencing.StatePath, "fencing-state", agent.DefaultFencingState, "file on the host that keeps the member list this agent counts against, so that an agent restarted during an API outage still counts (mount a hostPath)")
	f.StringVar(&fencingDoc, "fencing-document", peering.DefaultPeerSetNamespace+"/"+agent.DefaultFencingDocumentName, "NAMESPACE/NAME of the ConfigMap the controller publishes the fencing member list and rounds in")
	f.BoolVar(&opts.GossipOnly, "gossip-only", false, "no BIRD: run only the gossip member and its writer (needs --gossip-key-file); the BIRD flags are ignored")
	f.StringVar(&healthAddr, "health-addr", agent.DefaultHealthAddr, "address of /readyz and /healthz (plain HTTP, for the kubelet); empty disables them. "+
		"The default depends on the mode, so that the agents that may share a host's network never collide: "+agent.DefaultHealthAddr+", "+
		agent.DefaultGossipHealthAddr+" with --gossip-only, "+agent.DefaultRejoinHealthAddr+" with --rejoin-only")
	metricsserving.AddFlags(f, &metrics, agent.DefaultMetricsAddr)
	f.Lookup("metrics-bind-address").Usage += "; " + agent.DefaultGossipMetricsAddr + " by default with --gossip-only; none with --rejoin-only or --once"
	if hooks.Flags != nil {
		hooks.Flags(f)
	}
	return cmd
}

// listenAddrs are the probe and metrics addresses the agent serves on:
// the flags when given, else the defaults of its mode (agent.Options.
// DefaultListen), so that the BIRD agent, a gossip-only member and the
// rejoin agent on one host's network never take one port.
func listenAddrs(f *pflag.FlagSet, opts agent.Options, health, metrics string) (string, string) {
	defHealth, defMetrics := opts.DefaultListen()
	if !f.Changed("health-addr") {
		health = defHealth
	}
	if !f.Changed("metrics-bind-address") {
		metrics = defMetrics
	}
	return health, metrics
}

// metricsServer serves the agent's metrics (with the Go runtime's and the
// process's, which controller-runtime's registry carries) the way the
// controller serves its own; nil when --metrics-bind-address is 0. The
// registry is the process's: one agent per process.
func metricsServer(c metricsserving.Config, cfg *rest.Config, a *agent.Agent, opts agent.Options) (metricsserver.Server, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if !opts.GossipOnly {
		if err := crmetrics.Registry.Register(a.Collector()); err != nil {
			return nil, fmt.Errorf("registering the agent's metrics: %w", err)
		}
	}
	if opts.Gossip.KeyFile != "" {
		if err := crmetrics.Registry.Register(a.GossipCollector()); err != nil {
			return nil, fmt.Errorf("registering the agent's gossip metrics: %w", err)
		}
	}
	ms, err := c.NewServer(cfg)
	if err != nil {
		return nil, fmt.Errorf("--metrics-bind-address %s: %w", c.Addr, err)
	}
	return ms, nil
}

// serveAgent runs the agent and, when addr is set, its probe server, and
// the metrics server on metricsAddr when there is one, until ctx ends or
// one fails.
func serveAgent(ctx context.Context, a *agent.Agent, addr string, metrics metricsserver.Server, metricsAddr string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	if metrics != nil {
		go func() {
			if err := metrics.Start(ctx); err != nil {
				errc <- agent.ListenError("--metrics-bind-address", metricsAddr, fmt.Errorf("metrics server: %w", err))
			}
		}()
	}
	if addr != "" {
		ln, err := agent.Listen("--health-addr", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("probe server on %s: %w", addr, err)
			}
		}()
		defer func() {
			shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
			defer done()
			_ = srv.Shutdown(shutdown)
		}()
	}
	go func() { errc <- a.Run(ctx) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return <-errc
	}
}
