package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"

	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/confdlab"
	"rebound/internal/lab/sandbox"
)

// ConfdOptions say where Calico's confd and its inputs are.
type ConfdOptions struct {
	// Binary is confd (sandbox.EnsureConfd), Source the folder it was
	// built from (its templates are copied from there).
	Binary, Source string
	// API is the group Calico's objects are written in: the one confd
	// reads (confdlab.V1 whenever v1 is served).
	API confdlab.API
	// Dir holds each node's confd folder.
	Dir string
}

// ConfdConfig is where node n's confd renders its bird.cfg under dir: what
// birdlab.Options.ExternalConfig needs for a lab whose BIRDs confd
// configures.
func ConfdConfig(dir string) func(n *birdlab.Node) string {
	return func(n *birdlab.Node) string { return filepath.Join(dir, fmt.Sprintf("c%d", n.Index), "bird.cfg") }
}

// Confds are one confd per BIRD node of a lab on a sandbox, configured
// only from the sandbox's Calico objects.
type Confds struct {
	c    *sandbox.Cluster
	dyn  dynamic.Interface
	opts ConfdOptions
	lab  *birdlab.Lab

	mu     sync.Mutex
	byNode map[string]*confdlab.Confd
}

// StartConfds gives every node of the lab its Calico objects and its
// confd (Confds.Start). The cluster-wide objects (confdlab.CreateCluster)
// come first. The lab's Nodes must be the sandbox's. On an error the
// confds started are stopped.
func StartConfds(ctx context.Context, c *sandbox.Cluster, lab *birdlab.Lab, opts ConfdOptions) (*Confds, error) {
	cs, err := NewConfds(c, lab, opts)
	if err != nil {
		return nil, err
	}
	for _, n := range lab.Nodes {
		if err := cs.Start(ctx, n); err != nil {
			return nil, errors.Join(err, cs.Stop())
		}
	}
	return cs, nil
}

// NewConfds prepares confds for the lab's nodes without starting any: a
// node whose Node joins later gets its own with Start once it has.
func NewConfds(c *sandbox.Cluster, lab *birdlab.Lab, opts ConfdOptions) (*Confds, error) {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	return &Confds{c: c, dyn: dyn, opts: opts, lab: lab, byNode: map[string]*confdlab.Confd{}}, nil
}

// Start does for node n what calico-node does when it starts there: it
// annotates n's Node with its BGP address and AS, gives it its block
// (confdlab.CreateNode), and starts its confd, rendering into
// ConfdConfig(opts.Dir) and reloading n's BIRD.
func (cs *Confds) Start(ctx context.Context, n *birdlab.Node) error {
	if err := AnnotateBGP(ctx, cs.c.Client, n, nil); err != nil {
		return err
	}
	if err := confdlab.CreateNode(ctx, cs.c.Client, cs.dyn, confdlab.NodeOptions{
		API: cs.opts.API, Name: n.Name, Address: n.Address, AS: cs.lab.MeshConfig(n, nil).AS, Block: n.Route,
	}); err != nil {
		return err
	}
	d, err := confdlab.Start(confdlab.Options{
		Binary: cs.opts.Binary, Source: cs.opts.Source, Dir: filepath.Dir(ConfdConfig(cs.opts.Dir)(n)),
		// The admin kubeconfig: calico-node's own RBAC is Calico's,
		// not what this lab checks.
		Kubeconfig: cs.c.Kubeconfig, NodeName: n.Name,
		Bins: cs.lab.Bins(), Socket: n.Socket,
	})
	if err != nil {
		return err
	}
	cs.mu.Lock()
	cs.byNode[n.Name] = d
	cs.mu.Unlock()
	return nil
}

// Of returns node n's confd.
func (cs *Confds) Of(n *birdlab.Node) *confdlab.Confd {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.byNode[n.Name]
}

// Stop stops every confd.
func (cs *Confds) Stop() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var errs []error
	for _, d := range cs.byNode {
		errs = append(errs, d.Stop())
	}
	return errors.Join(errs...)
}

// RenderedFiles are every node's rendered files and confd log tail, for a
// failing test's log.
func (cs *Confds) RenderedFiles() string {
	var b strings.Builder
	for _, n := range cs.lab.Nodes {
		if d := cs.Of(n); d != nil {
			fmt.Fprintf(&b, "=== %s (%s)\n%s--- confd's log (tail):\n%s\n", n.Name, n.Address, d.RenderedFiles(), d.LogTail(15))
		}
	}
	return b.String()
}

// WaitPeers waits until n's confd has rendered exactly peers as n's BGP
// neighbours and, when n's BIRD runs, BIRD has loaded them.
func (cs *Confds) WaitPeers(ctx context.Context, n *birdlab.Node, peers []*birdlab.Node, timeout time.Duration) error {
	var addrs []netip.Addr
	for _, p := range peers {
		addrs = append(addrs, p.Address)
	}
	if err := cs.Of(n).WaitRendered(ctx, timeout, addrs); err != nil {
		return err
	}
	if n.Daemon() == nil {
		return nil
	}
	return birdlab.Poll(ctx, 100*time.Millisecond, timeout, n.Name+"'s BIRD loads its rendered peers", func() (bool, string) {
		protos, err := n.Client().Protocols(ctx)
		if err != nil {
			return false, err.Error()
		}
		var have []string
		for _, p := range protos {
			have = append(have, p.Name)
		}
		for _, p := range peers {
			if !slices.ContainsFunc(n.ProtocolNames(p.Address), func(name string) bool { return slices.Contains(have, name) }) {
				return false, fmt.Sprintf("no protocol for %s among %v", p.Name, have)
			}
		}
		return true, ""
	})
}
