package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"rebound/deploy"
	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/install"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
	"rebound/pkg/peering/kube"
)

// EnsurePeeringReportCRD applies the PeeringReport CRD (deploy/crd,
// embedded) and waits until the API server serves it: the peering
// controller watches PeeringReports and the agents write them.
func EnsurePeeringReportCRD(ctx context.Context, cfg *rest.Config) error {
	cl, err := install.NewClient(cfg)
	if err != nil {
		return err
	}
	_, err = install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-lab"}, deploy.PeeringReportCRD)
	return err
}

// PeeringController is a peering reconciler running in-process against a
// sandbox, as `rebound controller --peering` would run it.
type PeeringController struct {
	// PeerSet is where it publishes the set; agents need it.
	PeerSet types.NamespacedName
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	err     error
}

// Stop ends the controller and returns its error, once.
func (p *PeeringController) Stop() error {
	p.once.Do(func() {
		p.cancel()
		p.err = <-p.done
	})
	return p.err
}

// StartPeeringController installs the PeeringReport CRD and the state
// namespace if missing and starts a manager with the peering reconciler.
// Unless opts names one, the set is published in ConfigMap
// <state name>-set, so that several controllers can share a sandbox.
// logs receives the manager's log. The planner's node grace period is the
// sandbox's, as `rebound controller --node-monitor-grace-period` sets it.
func StartPeeringController(ctx context.Context, c *sandbox.Cluster, opts controller.PeeringOptions, logs io.Writer) (*PeeringController, error) {
	cfg := c.Config
	if opts.Config.NodeGracePeriod == 0 {
		opts.Config.NodeGracePeriod = c.Timings.NodeMonitorGracePeriod
	}
	ns := opts.State.Namespace
	if ns == "" {
		ns = controller.DefaultPeeringNamespace
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := EnsurePeeringReportCRD(ctx, cfg); err != nil {
		return nil, err
	}
	if opts.PeerSet.Name == "" {
		name := opts.State.Name
		if name == "" {
			name = controller.DefaultPeeringStateName
		}
		opts.PeerSet = types.NamespacedName{Namespace: ns, Name: name + "-set"}
	}
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 controller.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Several controllers may run in one process (tests).
		Controller: config.Controller{SkipNameValidation: &skip},
		Logger:     logr.FromSlogHandler(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		return nil, err
	}
	if err := controller.SetupPeering(mgr, opts); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &PeeringController{PeerSet: opts.PeerSet, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- mgr.Start(mctx) }()
	return p, nil
}

// Agent is a `rebound agent` running in-process for one BIRD of a lab.
type Agent struct {
	*agent.Agent
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// Stop ends the agent, as its node dying would, and returns its error.
func (a *Agent) Stop() error {
	a.once.Do(func() {
		a.cancel()
		a.err = <-a.done
	})
	return a.err
}

// StartAgent runs an agent for lab node n with cfg's credentials: it
// watches opts.PeerSet (required) and writes n's PeeringReport. The
// mesh, socket, address, port and BIRD settings come from the lab.
func StartAgent(cfg *rest.Config, lab *birdlab.Lab, n *birdlab.Node, opts agent.Options) (*Agent, error) {
	if opts.PeerSet.Name == "" {
		return nil, errors.New("scenario: agent options need PeerSet (the controller's)")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	opts.NodeName, opts.Client, opts.Reports = n.Name, cs, agent.APIReportWriter{Client: dyn}
	opts.MeshPath, opts.Socket = n.MeshPath, n.Socket
	opts.Address, opts.ListenPort = n.Address, n.Port
	mc := lab.MeshConfig(n, nil)
	opts.Version, opts.AS = mc.Version, mc.AS
	opts.GracefulRestartTime, opts.GracefulRestartWait = mc.GracefulRestartTime, mc.GracefulRestartWait
	a, err := agent.New(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &Agent{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	return ra, nil
}

// BirdLabOnSandbox starts a lab of BIRD daemons whose nodes are the
// sandbox's Nodes (lab node i is c.NodeNames[i], every one of them when
// opts.Nodes is 0) and annotates each Node with its BIRD's address and
// port, as Calico records them, adding extraLabels. The caller closes the
// lab; on an error there is none to close.
func BirdLabOnSandbox(ctx context.Context, c *sandbox.Cluster, opts birdlab.Options, extraLabels map[string]string) (*birdlab.Lab, error) {
	if opts.Nodes == 0 {
		opts.Nodes = len(c.NodeNames)
	}
	if opts.Nodes > len(c.NodeNames) {
		return nil, fmt.Errorf("a lab of %d BIRD nodes on a sandbox of %d Nodes", opts.Nodes, len(c.NodeNames))
	}
	opts.NodeName = func(i int) string { return c.NodeNames[i] }
	lab, err := birdlab.New(opts)
	if err != nil {
		return nil, err
	}
	for _, n := range lab.Nodes {
		if err := AnnotateBGP(ctx, c.Client, n, extraLabels); err != nil {
			return nil, errors.Join(err, lab.Close())
		}
	}
	return lab, nil
}

// StartMeshAgents starts one agent per lab node, reading set and logging
// to logs, with the lab scenarios' intervals, and waits until every BIRD
// has every session Established. stop stops the agents started, also
// when it returns an error.
func StartMeshAgents(ctx context.Context, c *sandbox.Cluster, lab *birdlab.Lab, set types.NamespacedName, logs io.Writer) (agents []*Agent, stop func(), err error) {
	return startMeshAgents(ctx, c, lab, set, logs, nil)
}

// startMeshAgents is StartMeshAgents with, for the nodes in paths, the
// agent reaching the apiserver through its own path (the lab cuts it).
func startMeshAgents(ctx context.Context, c *sandbox.Cluster, lab *birdlab.Lab, set types.NamespacedName, logs io.Writer, paths map[string]*sandbox.APIPath) (agents []*Agent, stop func(), err error) {
	stop = func() {
		for _, a := range agents {
			_ = a.Stop()
		}
	}
	for _, n := range lab.Nodes {
		cfg := c.Config
		if p := paths[n.Name]; p != nil {
			cfg = p.Config(c.Config)
		}
		a, err := StartAgent(cfg, lab, n, agent.Options{
			PeerSet: set, Debounce: 200 * time.Millisecond, StatusInterval: time.Second, ReportInterval: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
		})
		if err != nil {
			return agents, stop, err
		}
		agents = append(agents, a)
	}
	err = birdlab.Poll(ctx, 200*time.Millisecond, 90*time.Second, "every session Established", func() (bool, string) {
		for _, n := range lab.Nodes {
			ok, why, err := birdlab.Established(ctx, n, birdlab.Others(lab.Nodes, n))
			if !ok {
				return false, fmt.Sprint(n.Name, " lacks ", why, " ", err)
			}
		}
		return true, ""
	})
	return agents, stop, err
}

// AnnotateBGP tells node n's Node where its BIRD listens, the way Calico
// records a node's address (and, for several BIRDs on one host, the
// port), so that the controller publishes it. extraLabels are added.
func AnnotateBGP(ctx context.Context, cs kubernetes.Interface, n *birdlab.Node, extraLabels map[string]string) error {
	meta := map[string]any{
		"annotations": map[string]string{
			peering.AnnotationCalicoIPv4: n.Address.String() + "/32",
			peering.AnnotationBGPPort:    strconv.Itoa(int(n.Port)),
		},
	}
	if len(extraLabels) > 0 {
		// Only when there are some: "labels": null in a merge patch
		// deletes every label, the sandbox's heartbeat label with them,
		// which stops kwok managing the node.
		meta["labels"] = extraLabels
	}
	patch := map[string]any{"metadata": meta}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

// PublishedSet reads the set a controller published, nil when there is
// none yet.
func PublishedSet(ctx context.Context, cs kubernetes.Interface, key types.NamespacedName) (*peering.PeerSet, error) {
	cm, err := cs.CoreV1().ConfigMaps(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := kube.PeerSetFromConfigMap(cm)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// Members returns the names in a published set.
func Members(s *peering.PeerSet) []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s.Peers))
	for i, p := range s.Peers {
		out[i] = p.Name
	}
	return out
}
