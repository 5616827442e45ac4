package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// S4 on a sandbox is the seed's S4 (three BGP nodes A, B, C in Calico's
// style; B and C die, B returns with bird -R) with each BIRD node backed by
// a sandbox Node, so that the API sees the nodes die and return. Without
// rebound that is all; with rebound the real peering controller runs
// in-process and one real agent runs per BIRD node, exactly as
// `rebound controller --peering` and `rebound agent` would. The e2e tests
// (TestS4Bird16, TestS4Bird2) and the demo play S4 through RunS4OnSandbox
// with these settings, so their figures compare.
const (
	// S4Nodes are the BIRD nodes of a lane on a sandbox: A, B and C.
	S4Nodes = 3
	// S4GracefulRestartTime is the per-peer `graceful restart time`,
	// seconds: short, so that A drops B's stale routes before B returns
	// (the seed's nodes stayed down for minutes, far longer than Calico's
	// 120 s); it does not change B's recovery wait.
	S4GracefulRestartTime = 10
	// S4PruneGrace is the peering controller's PruneGracePeriod: with the
	// tests' 12 s node grace a dead node leaves the set about 15 s after
	// it died.
	S4PruneGrace = 3 * time.Second
	// S4ReportMaxAge drops a dead agent's last session report quickly.
	S4ReportMaxAge = 6 * time.Second
	// S4LaneLabel marks a lane's sandbox Nodes with the lane's name, so
	// that the lane's controller plans for its own nodes only.
	S4LaneLabel = "s4.rebound.dev/lane"
)

// S4SandboxOptions say where one lane of S4 runs.
type S4SandboxOptions struct {
	Cluster *sandbox.Cluster
	Bins    birdproc.Binaries
	// First is the index of the lane's first sandbox Node: the lane uses
	// First..First+S4Nodes-1; lanes that share a sandbox use different ones.
	First int
	// Net is the lab's loopback /16; lanes that run at the same time need
	// different values.
	Net int
	// Dir (short: unix socket paths) and NetNS are S4Options'.
	Dir, NetNS string
	// Name names the lane's controller, its state and the label value of
	// its Nodes; unique within the sandbox.
	Name    string
	Rebound bool
	// Checks run after the lane's own step at each point of the scenario
	// (the tests' assertions); each may be nil.
	Checks S4Hooks
}

// S4OnSandbox is one lane of S4 on a sandbox. Its controller's and agents'
// log lines go to the lane's timeline (kind "log").
type S4OnSandbox struct {
	opts S4SandboxOptions

	mu      sync.Mutex
	ctl     *PeeringController
	agents  map[string]*Agent
	stopped []*Agent
}

// NewS4OnSandbox prepares a lane; Run plays it.
func NewS4OnSandbox(opts S4SandboxOptions) *S4OnSandbox {
	return &S4OnSandbox{opts: opts, agents: map[string]*Agent{}}
}

// Agent returns the running agent of a node, nil if none runs.
func (s *S4OnSandbox) Agent(node string) *Agent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agents[node]
}

// PeerSet is where the lane's controller publishes the set.
func (s *S4OnSandbox) PeerSet() types.NamespacedName {
	return types.NamespacedName{Namespace: controller.DefaultPeeringNamespace, Name: s.stateName() + "-set"}
}

func (s *S4OnSandbox) stateName() string { return "rebound-peering-s4-" + s.opts.Name }

// Options are the S4Options the lane plays: the same for every caller.
func (s *S4OnSandbox) Options() S4Options {
	o := S4Options{
		Bins: s.opts.Bins, Nodes: S4Nodes, Net: s.opts.Net, Dir: s.opts.Dir, NetNS: s.opts.NetNS,
		NodeName:            func(i int) string { return s.opts.Cluster.NodeNames[s.opts.First+i] },
		GracefulRestartTime: S4GracefulRestartTime,
		Rebound:             s.opts.Rebound,
		// Without rebound B waits the whole 240 s; with rebound seconds.
		Cap: 330 * time.Second,
	}
	if s.opts.Rebound {
		o.Cap = 2 * time.Minute
		// BFD on, as the agent's default: BIRD 2 only (several BIRD 1.6 on
		// one host cannot share BFD's ports), with the dead nodes losing
		// power (frozen) so that only BFD tells their peers at once.
		if s.bfd() {
			o.BFD, o.Freeze = &bird.BFD{}, true
		}
	}
	return o
}

func (s *S4OnSandbox) bfd() bool { return s.opts.Rebound && s.opts.Bins.Version == bird.Bird2 }

// RunS4OnSandbox plays one lane of S4 on a sandbox.
func RunS4OnSandbox(ctx context.Context, tl *Timeline, opts S4SandboxOptions) (S4Result, error) {
	return NewS4OnSandbox(opts).Run(ctx, tl)
}

// Run plays the lane with RunS4 and stops its controller and agents.
func (s *S4OnSandbox) Run(ctx context.Context, tl *Timeline) (res S4Result, err error) {
	c := s.opts.Cluster
	if c == nil || s.opts.Name == "" {
		return res, errors.New("S4 on a sandbox needs a Cluster and a lane Name")
	}
	if s.opts.First < 0 || s.opts.First+S4Nodes > len(c.NodeNames) {
		return res, fmt.Errorf("S4 on a sandbox: nodes %d..%d, but the sandbox has %d", s.opts.First, s.opts.First+S4Nodes-1, len(c.NodeNames))
	}
	opts := s.Options()
	own := s.baselineHooks(c)
	if s.opts.Rebound {
		own = s.reboundHooks(c, tl)
	}
	opts.Hooks = chainS4Hooks(own, s.opts.Checks)
	defer func() {
		if serr := s.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	return RunS4(ctx, tl, opts)
}

// stop ends the lane's agents, then its controller.
func (s *S4OnSandbox) stop() error {
	s.mu.Lock()
	all := s.stopped
	for _, a := range s.agents {
		all = append(all, a)
	}
	s.agents, s.stopped = map[string]*Agent{}, nil
	ctl := s.ctl
	s.ctl = nil
	s.mu.Unlock()
	var errs []error
	for _, a := range all {
		if err := a.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("agent: %w", err))
		}
	}
	if ctl != nil {
		if err := ctl.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("peering controller: %w", err))
		}
	}
	return errors.Join(errs...)
}

// nodeGraceWait bounds a wait for a Node to turn NotReady: the sandbox's
// node grace plus a minute.
func nodeGraceWait(c *sandbox.Cluster) time.Duration {
	return c.Timings.NodeMonitorGracePeriod + c.Timings.NodeMonitorPeriod + time.Minute
}

// baselineHooks: the sandbox Nodes of the dead BIRDs stop and turn
// NotReady; B's Node is Ready again before its BIRD returns.
func (s *S4OnSandbox) baselineHooks(c *sandbox.Cluster) S4Hooks {
	return S4Hooks{
		Killed: func(ctx context.Context, _ *birdlab.Lab, dead []*birdlab.Node) error {
			return stopS4Nodes(ctx, c, dead)
		},
		Returning: func(ctx context.Context, _ *birdlab.Lab, b *birdlab.Node) error {
			if err := c.StartNode(ctx, b.Name); err != nil {
				return err
			}
			return c.WaitNodeReady(ctx, b.Name, true, nodeGraceWait(c))
		},
	}
}

func stopS4Nodes(ctx context.Context, c *sandbox.Cluster, dead []*birdlab.Node) error {
	for _, n := range dead {
		if err := c.StopNode(ctx, n.Name); err != nil {
			return err
		}
	}
	for _, n := range dead {
		if err := c.WaitNodeReady(ctx, n.Name, false, nodeGraceWait(c)); err != nil {
			return err
		}
	}
	return nil
}

// reboundHooks start the controller once the mesh converged, an agent per
// node, stop the dead nodes' agents with their Nodes, and bring B back:
// its Node Ready and in the set, its agent writing its BIRD's peers.
// BIRD 1.6 is started before B's agent, which then reconfigures the
// recovering BIRD; BIRD 2 keeps waiting for a peer a reconfiguration
// removes (2.0.12, measured), so there B's agent starts first and leaves
// the set, checked by BIRD's parser, in place for BIRD's start.
func (s *S4OnSandbox) reboundHooks(c *sandbox.Cluster, tl *Timeline) S4Hooks {
	var live []*birdlab.Node // the nodes that stay up, B's peers on its return
	var deadOthers []*birdlab.Node
	return S4Hooks{
		Converged: func(ctx context.Context, lab *birdlab.Lab) error {
			for _, n := range lab.Nodes {
				if err := AnnotateBGP(ctx, c.Client, n, map[string]string{S4LaneLabel: s.opts.Name}); err != nil {
					return err
				}
			}
			ctl, err := StartPeeringController(ctx, c, controller.PeeringOptions{
				Name:         "peering-s4-" + s.opts.Name,
				NodeSelector: labels.SelectorFromSet(labels.Set{S4LaneLabel: s.opts.Name}),
				Config:       peering.Config{PruneGracePeriod: S4PruneGrace, Evidence: peering.EvidenceOptions{ReportMaxAge: S4ReportMaxAge}},
				State:        types.NamespacedName{Namespace: controller.DefaultPeeringNamespace, Name: s.stateName()},
				PeerSet:      s.PeerSet(),
			}, newLogLines(tl, "controller"))
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.ctl = ctl
			s.mu.Unlock()
			tl.Step("rebound: the peering controller runs (prune grace %s); an agent on each of %d nodes", S4PruneGrace, len(lab.Nodes))
			for _, n := range lab.Nodes {
				if err := WaitInSet(ctx, c.Client, n.Name, true, 30*time.Second); err != nil {
					return err
				}
			}
			for _, n := range lab.Nodes {
				if err := s.startAgent(c, lab, n, tl); err != nil {
					return err
				}
			}
			return nil
		},
		Killed: func(ctx context.Context, lab *birdlab.Lab, dead []*birdlab.Node) error {
			isDead := map[*birdlab.Node]bool{}
			for _, d := range dead {
				isDead[d] = true
				if err := s.stopAgent(d.Name); err != nil {
					return err
				}
			}
			live, deadOthers = nil, nil
			for _, n := range lab.Nodes {
				switch {
				case !isDead[n]:
					live = append(live, n)
				case n != lab.Nodes[1]:
					deadOthers = append(deadOthers, n)
				}
			}
			if err := stopS4Nodes(ctx, c, dead); err != nil {
				return err
			}
			// The controller acts before B returns: the incident's leave
			// budget lets some dead node leave (one of three), not all.
			return birdlab.Poll(ctx, 200*time.Millisecond, S4PruneGrace+time.Minute, "a dead node leaves the set", func() (bool, string) {
				var seen []string
				for _, d := range dead {
					in, err := InSetLabel(ctx, c.Client, d.Name)
					if err != nil {
						return false, err.Error()
					}
					if in == "false" {
						return true, ""
					}
					seen = append(seen, d.Name+"="+in)
				}
				return false, strings.Join(seen, ", ")
			})
		},
		Returning: func(ctx context.Context, lab *birdlab.Lab, b *birdlab.Node) error {
			if err := c.StartNode(ctx, b.Name); err != nil {
				return err
			}
			if err := WaitInSet(ctx, c.Client, b.Name, true, nodeGraceWait(c)); err != nil {
				return err
			}
			// The live nodes' agents peer with B again.
			for _, n := range live {
				err := birdlab.Poll(ctx, 100*time.Millisecond, 30*time.Second, n.Name+"'s BIRD has a session configured for "+b.Name, func() (bool, string) {
					protos, err := n.Client().Protocols(ctx)
					if err != nil {
						return false, err.Error()
					}
					for _, p := range protos {
						if p.Name == bird.ProtocolName(b.Address) {
							return true, ""
						}
					}
					return false, "no protocol for " + b.Name + " yet"
				})
				if err != nil {
					return err
				}
			}
			// B's return gives its share of the leave budget back: the
			// other dead nodes leave now if they had not.
			for _, d := range deadOthers {
				if err := WaitInSet(ctx, c.Client, d.Name, false, S4PruneGrace+30*time.Second); err != nil {
					return err
				}
			}
			if s.opts.Bins.Version != bird.Bird2 {
				return nil
			}
			// B's include still holds what its agent wrote before B died.
			if err := s.startAgent(c, lab, b, tl); err != nil {
				return err
			}
			return birdlab.Poll(ctx, 100*time.Millisecond, 30*time.Second, b.Name+"'s agent staged the set for BIRD's start", func() (bool, string) {
				st := s.Agent(b.Name).Stats()
				return st.Staged >= 1, st.LastError
			})
		},
		Returned: func(ctx context.Context, lab *birdlab.Lab, b *birdlab.Node) error {
			if s.opts.Bins.Version == bird.Bird2 {
				return nil
			}
			return s.startAgent(c, lab, b, tl)
		},
	}
}

// startAgent runs node n's agent with the tests' short intervals, logging
// to the timeline.
func (s *S4OnSandbox) startAgent(c *sandbox.Cluster, lab *birdlab.Lab, n *birdlab.Node, tl *Timeline) error {
	a, err := StartAgent(c.Config, lab, n, agent.Options{
		PeerSet:  s.PeerSet(),
		BFD:      s.bfd(),
		Debounce: 200 * time.Millisecond, StatusInterval: time.Second, ReportInterval: 2 * time.Second,
		// Readiness must come from the set, not from the up-time escape.
		ReadyAfter: time.Hour,
		BirdBinary: s.opts.Bins.Bird, BirdConfig: n.Config,
		Logger: slog.New(slog.NewTextHandler(newLogLines(tl, "agent "+n.Name), nil)),
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.agents[n.Name]; old != nil {
		s.stopped = append(s.stopped, old)
	}
	s.agents[n.Name] = a
	return nil
}

// stopAgent stops a node's agent, as the node dying would.
func (s *S4OnSandbox) stopAgent(node string) error {
	s.mu.Lock()
	a := s.agents[node]
	delete(s.agents, node)
	s.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.Stop()
}

// Readyz is an agent's /readyz: status code and body.
func Readyz(a *Agent) (int, string) {
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// InSetLabel reads a node's peering.rebound.dev/in-set label.
func InSetLabel(ctx context.Context, cs kubernetes.Interface, node string) (string, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return n.Labels[peering.LabelInSet], nil
}

// WaitInSet waits until the node's label says in (true) or out (false).
func WaitInSet(ctx context.Context, cs kubernetes.Interface, node string, in bool, timeout time.Duration) error {
	want := fmt.Sprint(in)
	return birdlab.Poll(ctx, 200*time.Millisecond, timeout, fmt.Sprintf("%s %s=%s", node, peering.LabelInSet, want), func() (bool, string) {
		got, err := InSetLabel(ctx, cs, node)
		if err != nil {
			return false, err.Error()
		}
		return got == want, "label is " + got
	})
}

// chainS4Hooks runs first's hook, then then's, at each point.
func chainS4Hooks(first, then S4Hooks) S4Hooks {
	h := first
	if f, g := first.Converged, then.Converged; g != nil {
		h.Converged = func(ctx context.Context, lab *birdlab.Lab) error {
			if f != nil {
				if err := f(ctx, lab); err != nil {
					return err
				}
			}
			return g(ctx, lab)
		}
	}
	if f, g := first.Killed, then.Killed; g != nil {
		h.Killed = func(ctx context.Context, lab *birdlab.Lab, dead []*birdlab.Node) error {
			if f != nil {
				if err := f(ctx, lab, dead); err != nil {
					return err
				}
			}
			return g(ctx, lab, dead)
		}
	}
	h.Returning = chainNodeHook(first.Returning, then.Returning)
	h.Returned = chainNodeHook(first.Returned, then.Returned)
	if f, g := first.Measured, then.Measured; g != nil {
		h.Measured = func(ctx context.Context, lab *birdlab.Lab, res S4Result) error {
			if f != nil {
				if err := f(ctx, lab, res); err != nil {
					return err
				}
			}
			return g(ctx, lab, res)
		}
	}
	return h
}

func chainNodeHook(f, g func(context.Context, *birdlab.Lab, *birdlab.Node) error) func(context.Context, *birdlab.Lab, *birdlab.Node) error {
	if g == nil {
		return f
	}
	return func(ctx context.Context, lab *birdlab.Lab, n *birdlab.Node) error {
		if f != nil {
			if err := f(ctx, lab, n); err != nil {
				return err
			}
		}
		return g(ctx, lab, n)
	}
}
