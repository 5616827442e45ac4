package scenario

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/diagnose"
	"rebound/pkg/peering"
)

// S7, the peering half: a control-plane partition. Every node's BIRD and
// agent keep running, but every node stops heartbeating at once, so the
// API sees all of them NotReady (kube-controller-manager's full
// disruption). The peer set must not change, and no agent may remove a
// peer: BIRD keeps every session it has.

// S7PeeringOptions tune the scenario. Zero values mean the defaults.
type S7PeeringOptions struct {
	Bins birdproc.Binaries
	// Net is the BIRD lab's loopback /16 (see birdlab.Options.Net).
	Net int
	// PruneGrace and ReportMaxAge are the peering controller's; Hold is
	// how long every node stays NotReady (default 3x the larger).
	PruneGrace   time.Duration
	ReportMaxAge time.Duration
	Hold         time.Duration
	Logs         io.Writer
}

func (o S7PeeringOptions) withDefaults() S7PeeringOptions {
	if o.PruneGrace == 0 {
		o.PruneGrace = 4 * time.Second
	}
	if o.ReportMaxAge == 0 {
		o.ReportMaxAge = 6 * time.Second
	}
	if o.Hold == 0 {
		o.Hold = 3 * max(o.PruneGrace, o.ReportMaxAge)
	}
	if o.Logs == nil {
		o.Logs = io.Discard
	}
	return o
}

// S7PeeringResult is what was measured while every node was NotReady
// (from the first NotReady transition until the first node was Ready
// again), from the API (watches) and from the agents' mesh files.
type S7PeeringResult struct {
	// SetChanges counts changes of the published set's membership (what
	// agents render) plus changes of any node's in-set label.
	SetChanges int
	// DocumentWrites counts every write of the document (Ready flags and
	// the freeze reason are published too; they change nothing rendered).
	DocumentWrites int
	// MeshChanges counts agents whose mesh file differs at the end of
	// the partition from its start; RemovedPeers lists peers missing.
	MeshChanges  int
	RemovedPeers []string
	// AllNotReady is how long every node was NotReady at once, from the
	// API's timestamps: the last of their NotReady transitions to the
	// first of their Ready transitions after the heal.
	AllNotReady time.Duration
	// Frozen and FrozenReason are what the published set said.
	Frozen       bool
	FrozenReason string
	// Members is the set's size before, and after the nodes returned.
	MembersBefore, MembersAfter int
	// Diagnose is `rebound diagnose`'s finding about the frozen set.
	Diagnose string
	// AgentRefusals sums the agents' refused sets (should stay 0: a
	// frozen set is a full set).
	AgentRefusals int
}

// S7ControlPlanePartitionPeering runs the partition on a sandbox (its
// nodes become BIRD nodes of a lab) and returns the measurements. PeerSet
// is rebound-system/rebound-peer-set, the production name, so that
// `rebound diagnose` reads it.
func S7ControlPlanePartitionPeering(ctx context.Context, c *sandbox.Cluster, opts S7PeeringOptions) (S7PeeringResult, error) {
	opts = opts.withDefaults()
	var res S7PeeringResult
	dir, err := os.MkdirTemp("", "rb7")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	lab, err := BirdLabOnSandbox(ctx, c, birdlab.Options{Bins: opts.Bins, Net: opts.Net, Dir: dir, Include: true}, nil)
	if err != nil {
		return res, err
	}
	defer lab.Close()
	set := types.NamespacedName{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName}
	pc, err := StartPeeringController(ctx, c, controller.PeeringOptions{
		Name:    "peering-s7",
		Config:  peering.Config{PruneGracePeriod: opts.PruneGrace, Evidence: peering.EvidenceOptions{ReportMaxAge: opts.ReportMaxAge}},
		PeerSet: set,
	}, opts.Logs)
	if err != nil {
		return res, err
	}
	defer pc.Stop()
	if err := waitMembers(ctx, c, set, 60*time.Second, "every node in the set", func(m []string) bool { return len(m) == len(c.NodeNames) }); err != nil {
		return res, err
	}
	if err := lab.StartAll(ctx); err != nil {
		return res, err
	}
	agents, stopAgents, err := StartMeshAgents(ctx, c, lab, set, opts.Logs)
	defer stopAgents()
	if err != nil {
		return res, err
	}
	before, err := PublishedSet(ctx, c.Client, set)
	if err != nil {
		return res, err
	}
	res.MembersBefore = len(before.Peers)
	meshBefore := map[string][]byte{}
	for _, n := range lab.Nodes {
		if meshBefore[n.Name], err = os.ReadFile(n.MeshPath); err != nil {
			return res, err
		}
	}

	// Every label published before counting starts.
	if err := birdlab.Poll(ctx, 200*time.Millisecond, 30*time.Second, "every node labelled in the set", func() (bool, string) {
		for _, name := range c.NodeNames {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || n.Labels[peering.LabelInSet] != "true" {
				return false, name
			}
		}
		return true, ""
	}); err != nil {
		return res, err
	}
	// Count every write of the set and every label change from now on.
	rec := &setRecorder{}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := rec.start(wctx, c, set); err != nil {
		return res, err
	}

	// The partition: every node stops heartbeating at once.
	for _, n := range c.NodeNames {
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range c.NodeNames {
		if err := c.WaitNodeReady(ctx, n, false, 90*time.Second); err != nil {
			return res, err
		}
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(opts.Hold):
	}
	allDown, err := lastNotReady(ctx, c.Client, c.NodeNames)
	if err != nil {
		return res, fmt.Errorf("at the hold's end: %w", err)
	}
	during, err := PublishedSet(ctx, c.Client, set)
	if err != nil {
		return res, err
	}
	res.Frozen, res.FrozenReason = during.Frozen, during.FrozenReason
	for _, n := range lab.Nodes {
		now, err := os.ReadFile(n.MeshPath)
		if err != nil {
			return res, err
		}
		if string(now) != string(meshBefore[n.Name]) {
			res.MeshChanges++
		}
		for _, p := range birdlab.Others(lab.Nodes, n) {
			ok, _, _ := birdlab.Established(ctx, n, []*birdlab.Node{p})
			if !ok {
				res.RemovedPeers = append(res.RemovedPeers, n.Name+"->"+p.Name)
			}
		}
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return res, err
	}
	snap, x, err := diagnose.Gather(ctx, diagnose.Clients{Kube: c.Client, Dynamic: dyn, Host: c.APIServerURL}, time.Now())
	if err != nil {
		return res, err
	}
	x.Peering = peering.Config{PruneGracePeriod: opts.PruneGrace}
	for _, f := range diagnose.Explain(snap, x).Findings {
		if f.Kind == "BGPFrozen" {
			res.Diagnose = f.Cause
		}
	}
	res.SetChanges = rec.count()
	res.DocumentWrites = rec.documentWrites()

	// The partition heals.
	for _, n := range c.NodeNames {
		if err := c.StartNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range c.NodeNames {
		if err := c.WaitNodeReady(ctx, n, true, 90*time.Second); err != nil {
			return res, err
		}
	}
	back, err := firstReady(ctx, c.Client, c.NodeNames)
	if err != nil {
		return res, fmt.Errorf("after the heal: %w", err)
	}
	res.AllNotReady = back.Sub(allDown)
	if err := waitMembers(ctx, c, set, 30*time.Second, "the set follows health again", func(m []string) bool { return len(m) == len(c.NodeNames) }); err != nil {
		return res, err
	}
	after, err := PublishedSet(ctx, c.Client, set)
	if err != nil {
		return res, err
	}
	res.MembersAfter = len(after.Peers)
	for _, a := range agents {
		res.AgentRefusals += a.Stats().Refused
	}
	return res, nil
}

// setRecorder counts, from watches, changes of the published set's
// membership (names, addresses, ports: what agents render) and of the
// nodes' in-set labels; writes counts every change of the document (its
// members' Ready flags and the freeze are published too).
type setRecorder struct {
	mu      sync.Mutex
	changes int
	writes  int
}

func (r *setRecorder) documentWrites() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes
}

// membership is the render-relevant part of a published document.
func membership(data string) string {
	s, err := peering.ParsePeerSet(data)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	var b strings.Builder
	for _, p := range s.Peers {
		fmt.Fprintf(&b, "%s=%s:%d;", p.Name, p.Address, p.Port)
	}
	return b.String()
}

func (r *setRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changes
}

func (r *setRecorder) start(ctx context.Context, c *sandbox.Cluster, set types.NamespacedName) error {
	cms, err := c.Client.CoreV1().ConfigMaps(set.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", set.Name).String()})
	if err != nil {
		return err
	}
	nodes, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cms.Stop()
		return err
	}
	data, raw := "", ""
	labels := map[string]string{}
	first := map[string]bool{}
	go func() {
		defer cms.Stop()
		defer nodes.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-cms.ResultChan():
				if !ok {
					return
				}
				cm, isCM := ev.Object.(*corev1.ConfigMap)
				if !isCM || ev.Type == watch.Bookmark {
					continue
				}
				v := membership(cm.Data[peering.PeerSetKey])
				r.mu.Lock()
				if data != "" && v != data {
					r.changes++
				}
				if data != "" && cm.Data[peering.PeerSetKey] != raw {
					r.writes++
				}
				data, raw = v, cm.Data[peering.PeerSetKey]
				r.mu.Unlock()
			case ev, ok := <-nodes.ResultChan():
				if !ok {
					return
				}
				n, isNode := ev.Object.(*corev1.Node)
				if !isNode {
					continue
				}
				v := n.Labels[peering.LabelInSet]
				r.mu.Lock()
				if first[n.Name] && labels[n.Name] != v {
					r.changes++
				}
				first[n.Name], labels[n.Name] = true, v
				r.mu.Unlock()
			}
		}
	}()
	return nil
}
