package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/confdlab"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
)

// S4 on Calico's own renderer: the seed's S4 (A, B, C; B and C die, B
// returns with bird -R) with every BIRD configured only by its node's
// confd from the sandbox's Calico objects, as on a cluster running
// calico-node. Without rebound Calico's node-to-node mesh keeps the dead C
// in B's bird.cfg, so B's BIRD waits for it; with rebound the real
// `rebound controller --peering --calico` publishes its BGPPeer, the mesh
// is switched off as docs/peering-calico.md says, and confd renders only
// the nodes of the set. A lane takes a sandbox of its own: the
// BGPConfiguration "default" that says mesh on or off is cluster-wide.

// S4CalicoPool is the IPPool of the confd lanes: the lab's announced /26s
// (birdlab) are blocks of it.
var S4CalicoPool = netip.MustParsePrefix("198.18.0.0/15")

// S4ConfdOptions say where one confd lane of S4 runs.
type S4ConfdOptions struct {
	// Cluster is the lane's own sandbox, with S4Nodes Nodes.
	Cluster *sandbox.Cluster
	Bins    birdproc.Binaries
	// Confd is confd and its source; its API and Dir are set by the lane
	// (crd.projectcalico.org/v1, a folder under Dir).
	Confd ConfdOptions
	// CRDs is the folder of Calico's published CRDs (confdlab.InstallCRDs).
	CRDs string
	// Net, Dir and NetNS are S4Options'.
	Net        int
	Dir, NetNS string
	Rebound    bool
	// BirdFirst (with Rebound): B's BIRD starts as soon as B's Node is
	// Ready, as calico-node starts it, not once the set has settled; B
	// starts with the other dead node still in its bird.cfg, and confd
	// reloads BIRD when the controller takes that node out.
	BirdFirst bool
	// Controller starts `rebound controller` with args (the lane with
	// rebound) and returns how to stop it.
	Controller func(ctx context.Context, args ...string) (stop func() error, err error)
	// Checks run after the lane's own step at each point (may be nil).
	Checks S4Hooks
}

// S4ControllerArgs are the flags of the lane's `rebound controller`: the
// peering controller with the Calico backend, the S4 lanes' prune grace,
// report age and restart time, no recovery controller.
func S4ControllerArgs() []string {
	return []string{
		"--no-recovery", "--leader-elect=false", "--peering", "--calico",
		fmt.Sprintf("--calico-max-restart-time=%ds", S4GracefulRestartTime),
		"--peering-prune-grace-period=" + S4PruneGrace.String(),
		"--peering-report-max-age=" + S4ReportMaxAge.String(),
	}
}

// S4Confd is one confd lane of S4.
type S4Confd struct {
	opts S4ConfdOptions

	mu      sync.Mutex
	confds  *Confds
	stopCtl func() error
}

// NewS4Confd prepares a lane; Run plays it.
func NewS4Confd(opts S4ConfdOptions) *S4Confd { return &S4Confd{opts: opts} }

// RenderedFiles are the lane's rendered files and confd logs, "" before
// its confds start.
func (s *S4Confd) RenderedFiles() string {
	s.mu.Lock()
	cs := s.confds
	s.mu.Unlock()
	if cs == nil {
		return ""
	}
	return cs.RenderedFiles()
}

// Run plays the lane with RunS4.
func (s *S4Confd) Run(ctx context.Context, tl *Timeline) (res S4Result, err error) {
	c := s.opts.Cluster
	if c == nil || len(c.NodeNames) < S4Nodes {
		return res, fmt.Errorf("S4 with confd needs a sandbox of %d Nodes", S4Nodes)
	}
	if s.opts.Rebound && s.opts.Controller == nil {
		return res, errors.New("S4 with confd and rebound needs a Controller to start")
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return res, err
	}
	api := confdlab.V1
	if err := confdlab.InstallCRDs(ctx, c.Config, s.opts.CRDs, api); err != nil {
		return res, err
	}
	// A Calico cluster starts with the node-to-node mesh on; its restart
	// time is the S4 lanes' per-peer one.
	if err := confdlab.CreateCluster(ctx, dyn, confdlab.ClusterOptions{
		API: api, Mesh: true, MeshRestartTime: S4GracefulRestartTime * time.Second, Pool: S4CalicoPool,
	}); err != nil {
		return res, err
	}
	copts := s.opts.Confd
	copts.API, copts.Dir = api, s.opts.Dir
	opts := S4Options{
		Bins: s.opts.Bins, Nodes: S4Nodes, Net: s.opts.Net, Dir: s.opts.Dir, NetNS: s.opts.NetNS,
		NodeName:            func(i int) string { return c.NodeNames[i] },
		GracefulRestartTime: S4GracefulRestartTime,
		Rebound:             s.opts.Rebound,
		// Calico's BIRDs bind their node's address (bindMode NodeIP) on
		// BGP's port, each in the lane's namespace, as on real nodes.
		Port:           179,
		ExternalConfig: ConfdConfig(s.opts.Dir),
		ProtocolNames:  confdlab.ProtocolNames,
		Cap:            330 * time.Second,
	}
	if s.opts.Rebound {
		opts.Cap = 2 * time.Minute
	}
	opts.Hooks = chainS4Hooks(s.hooks(c, dyn, api, copts, tl), s.opts.Checks)
	defer func() {
		if serr := s.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	return RunS4(ctx, tl, opts)
}

func (s *S4Confd) stop() error {
	s.mu.Lock()
	cs, stopCtl := s.confds, s.stopCtl
	s.stopCtl = nil
	s.mu.Unlock()
	var errs []error
	if cs != nil {
		errs = append(errs, cs.Stop())
	}
	if stopCtl != nil {
		errs = append(errs, stopCtl())
	}
	return errors.Join(errs...)
}

// peersOf are the nodes n's confd should render as its peers now: every
// other node with Calico's mesh on; with rebound's BGPPeer, those its
// selector (calico.InSetSelector) picks: not labelled out.
func (s *S4Confd) peersOf(ctx context.Context, c *sandbox.Cluster, lab *birdlab.Lab, n *birdlab.Node, mesh bool) ([]*birdlab.Node, error) {
	var out []*birdlab.Node
	for _, p := range birdlab.Others(lab.Nodes, n) {
		if !mesh {
			in, err := InSetLabel(ctx, c.Client, p.Name)
			if err != nil {
				return nil, err
			}
			if in == "false" {
				continue
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (s *S4Confd) hooks(c *sandbox.Cluster, dyn dynamic.Interface, api confdlab.API, copts ConfdOptions, tl *Timeline) S4Hooks {
	mesh := true
	waitAll := func(ctx context.Context, lab *birdlab.Lab, nodes []*birdlab.Node) error {
		s.mu.Lock()
		cs := s.confds
		s.mu.Unlock()
		for _, n := range nodes {
			peers, err := s.peersOf(ctx, c, lab, n, mesh)
			if err != nil {
				return err
			}
			if err := cs.WaitPeers(ctx, n, peers, time.Minute); err != nil {
				return err
			}
		}
		return nil
	}
	return S4Hooks{
		Starting: func(ctx context.Context, lab *birdlab.Lab) error {
			cs, err := StartConfds(ctx, c, lab, copts)
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.confds = cs
			s.mu.Unlock()
			tl.Step("Calico's objects (mesh on, a VXLAN pool, each node's address, AS and block) and a confd per node; BIRD starts from confd's bird.cfg")
			return waitAll(ctx, lab, lab.Nodes)
		},
		Converged: func(ctx context.Context, lab *birdlab.Lab) error {
			if !s.opts.Rebound {
				return nil
			}
			if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controller.DefaultPeeringNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			stop, err := s.opts.Controller(ctx, S4ControllerArgs()...)
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.stopCtl = stop
			s.mu.Unlock()
			for _, n := range lab.Nodes {
				if err := WaitInSet(ctx, c.Client, n.Name, true, time.Minute); err != nil {
					return err
				}
			}
			peers := dyn.Resource(api.GVR("bgppeers"))
			if err := birdlab.Poll(ctx, 200*time.Millisecond, time.Minute, "rebound's BGPPeer "+calico.DefaultPeerName, func() (bool, string) {
				_, err := peers.Get(ctx, calico.DefaultPeerName, metav1.GetOptions{})
				return err == nil, fmt.Sprint(err)
			}); err != nil {
				return err
			}
			// The migration's switch (docs/peering-calico.md): Calico's mesh off.
			if err := confdlab.SetMesh(ctx, dyn, api, false); err != nil {
				return err
			}
			mesh = false
			tl.Step("rebound: `rebound controller --peering --calico` publishes its BGPPeer; Calico's node-to-node mesh off")
			if err := waitAll(ctx, lab, lab.Nodes); err != nil {
				return err
			}
			return birdlab.Poll(ctx, 500*time.Millisecond, 2*time.Minute, "the BGPPeer's sessions come up", func() (bool, string) {
				for _, n := range lab.Nodes {
					if ok, missing, err := birdlab.Established(ctx, n, birdlab.Others(lab.Nodes, n)); !ok {
						return false, fmt.Sprintf("%s: no session with %s %v", n.Name, missing, err)
					}
				}
				return true, ""
			})
		},
		Killed: func(ctx context.Context, lab *birdlab.Lab, dead []*birdlab.Node) error {
			s.mu.Lock()
			cs := s.confds
			s.mu.Unlock()
			// calico-node dies with its node.
			for _, d := range dead {
				if err := cs.Of(d).Stop(); err != nil {
					return err
				}
			}
			// No wait for a dead node to leave here, unlike the lane with rebound's
			// agents: calico-node reports no sessions, so no live peer
			// confirms the two dead nodes down, and the leave budget (2 of
			// 3 at once is more than half) holds the set until B returns.
			return stopS4Nodes(ctx, c, dead)
		},
		Returning: func(ctx context.Context, lab *birdlab.Lab, b *birdlab.Node) error {
			if s.opts.Rebound {
				var labels []string
				for _, n := range lab.Nodes {
					in, err := InSetLabel(ctx, c.Client, n.Name)
					if err != nil {
						return err
					}
					labels = append(labels, n.Name+"="+in)
				}
				tl.Step("before %s returns, the set (%s): %s", b.Name, peering.LabelInSet, strings.Join(labels, ", "))
			}
			if err := c.StartNode(ctx, b.Name); err != nil {
				return err
			}
			if err := c.WaitNodeReady(ctx, b.Name, true, nodeGraceWait(c)); err != nil {
				return err
			}
			if s.opts.Rebound {
				if err := WaitInSet(ctx, c.Client, b.Name, true, nodeGraceWait(c)); err != nil {
					return err
				}
				// B's return thaws the set: the other dead node leaves a
				// prune grace later (a freeze ends gently). B's BIRD starts
				// after that, as in the lane with rebound's agents; with
				// BirdFirst at once, as calico-node would.
				for _, d := range lab.Nodes[2:] {
					if s.opts.BirdFirst {
						break
					}
					if err := WaitInSet(ctx, c.Client, d.Name, false, S4PruneGrace+30*time.Second); err != nil {
						return err
					}
				}
			}
			s.mu.Lock()
			cs := s.confds
			s.mu.Unlock()
			// The live node peers with B again; B's calico-node starts,
			// its confd renders B's bird.cfg before BIRD starts.
			if err := waitAll(ctx, lab, lab.Nodes[:1]); err != nil {
				return err
			}
			if err := cs.Of(b).Start(); err != nil {
				return err
			}
			if err := waitAll(ctx, lab, []*birdlab.Node{b}); err != nil {
				return err
			}
			var names []string
			for _, a := range confdlab.Neighbours(cs.Of(b).Rendered()) {
				names = append(names, a.String())
			}
			tl.Step("%s's confd rendered its peers %s", b.Name, strings.Join(names, ", "))
			return nil
		},
	}
}
