package scenario

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/birdproc"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
)

// S10: an asymmetric partition. The API hears only node-0; nodes 1..N-1
// stop heartbeating one at a time, a second apart, while their BIRDs and
// agents keep running, so every BGP session stays up. Calico's mesh keeps
// every live session and upstream evicts nothing; rebound must remove no
// peer (node-0's agent still has a session Established with each) and
// delete no more critical pods than node-0 can run: each critical pod
// asks for more than half of node-0's room, so one replacement fits.
// Every pod not replaced keeps its UID through the heal.
//
// The caller runs `rebound controller --peering` (recovery and peering in
// one process, as deployed) under a policy that makes kube-system's
// system-cluster-critical pods critical, publishing the set at PeerSet.

// S10Options tune the scenario. Zero values mean the defaults.
type S10Options struct {
	Bins birdproc.Binaries
	// Net is the BIRD lab's loopback /16 (see birdlab.Options.Net).
	Net int
	// PeerSet is where the controller publishes the set; zero means
	// rebound-system/rebound-peer-set.
	PeerSet types.NamespacedName
	// Stagger is the time between two nodes' heartbeats stopping
	// (default 1 s).
	Stagger time.Duration
	// Hold is how long every partitioned node stays NotReady before the
	// heal (the test: 3x the prune grace, and past maxUnavailableTime).
	Hold time.Duration
	// User is the controller's identity, to count its deletions in the
	// apiserver's audit log.
	User string
	// ShareOfNode is each critical pod's CPU request as a share of
	// node-0's allocatable CPU (default 0.6: one fits, two do not).
	ShareOfNode float64
	// AgentsLoseAPI makes the agents of the partitioned nodes lose the API
	// with their kubelets, as in a real partition: each BIRD agent
	// reaches the apiserver through its own path, cut with its node's
	// heartbeats, and so does each of GossipAgents (started with
	// OwnAPIPaths). Without it, as the scenario was first written, the
	// agents keep the API. Either way BGP and gossip go on.
	AgentsLoseAPI bool
	GossipAgents  map[string]*GossipAgent
	// GossipOnly plays it without BIRD or BIRD agents: the gossip agents
	// are the only witnesses (Bins and Net are not used).
	GossipOnly bool
	Logs       io.Writer
}

func (o S10Options) withDefaults() S10Options {
	if o.PeerSet.Name == "" {
		o.PeerSet = types.NamespacedName{Namespace: peering.DefaultPeerSetNamespace, Name: peering.DefaultPeerSetName}
	}
	if o.Stagger == 0 {
		o.Stagger = time.Second
	}
	if o.Hold == 0 {
		o.Hold = 30 * time.Second
	}
	if o.ShareOfNode == 0 {
		o.ShareOfNode = 0.6
	}
	if o.Logs == nil {
		o.Logs = io.Discard
	}
	return o
}

// S10Result is what the scenario measured. The window is from the first
// partitioned node's heartbeat stopping until the heal starts.
type S10Result struct {
	// CPURequest is each critical pod's request; Room is what node-0 had
	// free for critical pods before the partition.
	CPURequest, Room string
	// Removed maps each node that left the published set (or whose
	// in-set label turned false) during the window to how.
	Removed map[string]string
	// LostSessions lists, at the end of the window, BIRD sessions
	// ("observer->peer") that are missing or not Established; MeshChanges
	// counts agents whose mesh file changed during the window.
	LostSessions []string
	MeshChanges  int
	// Reasons is the published reason of each partitioned node at the
	// end of the window.
	Reasons map[string]peering.Reason
	// Deleted lists the critical pods the controller deleted during the
	// window (the audit log); DeletedThroughHeal counts them up to the end.
	Deleted            []string
	DeletedThroughHeal int
	// Pending lists the critical pods without a node at the end of the
	// window: replacements beyond what fits; OnSurvivor those on node-0.
	Pending, OnSurvivor []string
	// AllNotReady is how long every partitioned node was NotReady at once,
	// from the API's timestamps: the last of their NotReady transitions to
	// the first of their Ready transitions after the heal.
	AllNotReady time.Duration
	// Before and After map each workload to its pods' UIDs, before the
	// partition and once every node is back; Replaced names the workloads
	// whose pod the controller deleted.
	Before, After map[string][]types.UID
	Replaced      []string
}

// S10AsymmetricPartition plays S10 on a sandbox of at least 3 nodes (5 in
// the design): node-0 survives, every other node is partitioned.
func S10AsymmetricPartition(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S10Options) (S10Result, error) {
	opts = opts.withDefaults()
	res := S10Result{Removed: map[string]string{}, Reasons: map[string]peering.Reason{}, Before: map[string][]types.UID{}, After: map[string][]types.UID{}}
	if len(c.NodeNames) < 3 {
		return res, fmt.Errorf("S10 needs at least 3 nodes, the sandbox has %d", len(c.NodeNames))
	}
	survivor, cut := c.NodeNames[0], c.NodeNames[1:]
	grace := c.Timings.NodeMonitorGracePeriod

	// Critical pods, one on each node to be cut off, each larger than half
	// of the survivor's room.
	request, room, err := s10Request(ctx, c, survivor, opts.ShareOfNode)
	if err != nil {
		return res, err
	}
	res.CPURequest, res.Room = request.String(), room.String()
	var workloads []Workload
	for i, n := range cut {
		w := CriticalStandIn(n)
		w.Name = fmt.Sprintf("s10-crit-%d", i+1)
		w.Requests = corev1.ResourceList{corev1.ResourceCPU: request}
		workloads = append(workloads, w)
	}
	tl.Step("create %d critical Deployments on %s, each requesting cpu %s (%s has %s free: room for one)",
		len(workloads), strings.Join(cut, ", "), request.String(), survivor, room.String())
	for _, w := range workloads {
		if err := w.Create(ctx, c.Client); err != nil {
			return res, err
		}
	}
	for _, w := range workloads {
		if err := waitPodReadyOn(ctx, c, w, w.PreferNode); err != nil {
			return res, err
		}
		if res.Before[w.String()], err = podUIDs(ctx, c, w); err != nil {
			return res, err
		}
	}

	// A BIRD and an agent per node, meshed, every session Established
	// (unless GossipOnly).
	paths := map[string]*sandbox.APIPath{}
	if opts.AgentsLoseAPI {
		for _, n := range cut {
			p, err := c.OpenAPIPath()
			if err != nil {
				return res, err
			}
			defer p.Close()
			paths[n] = p
			if a := opts.GossipAgents[n]; a != nil && a.API == nil {
				return res, fmt.Errorf("S10: the gossip agent of %s has no API path of its own to cut", n)
			}
		}
	}
	var labNodes []*birdlab.Node
	meshBefore := map[string][]byte{}
	if !opts.GossipOnly {
		dir, err := os.MkdirTemp("", "rb10")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		lab, err := BirdLabOnSandbox(ctx, c, birdlab.Options{Bins: opts.Bins, Net: opts.Net, Dir: dir, Include: true}, nil)
		if err != nil {
			return res, err
		}
		defer lab.Close()
		labNodes = lab.Nodes
		if err := waitMembers(ctx, c, opts.PeerSet, 60*time.Second, "every node in the published set", func(m []string) bool { return len(m) == len(c.NodeNames) }); err != nil {
			return res, err
		}
		if err := lab.StartAll(ctx); err != nil {
			return res, err
		}
		_, stopAgents, err := startMeshAgents(ctx, c, lab, opts.PeerSet, opts.Logs, paths)
		defer stopAgents()
		if err != nil {
			return res, err
		}
	} else if err := waitMembers(ctx, c, opts.PeerSet, 60*time.Second, "every node in the published set", func(m []string) bool { return len(m) == len(c.NodeNames) }); err != nil {
		return res, err
	}
	if err := waitLabelled(ctx, c, c.NodeNames); err != nil {
		return res, err
	}
	for _, n := range labNodes {
		var err error
		if meshBefore[n.Name], err = os.ReadFile(n.MeshPath); err != nil {
			return res, err
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rec, err := recordRemovals(wctx, c, opts.PeerSet, cut)
	if err != nil {
		return res, err
	}
	windowStart := time.Now()

	// The partition: the API stops hearing the nodes one at a time.
	if opts.AgentsLoseAPI {
		planes := "their BIRDs and gossip keep running"
		if opts.GossipOnly {
			planes = "their gossip keeps running (no BGP)"
		}
		tl.Step("cut %s from the API, %s apart: kubelet and agents; %s", strings.Join(cut, ", "), opts.Stagger, planes)
	} else {
		tl.Step("stop the heartbeats of %s, %s apart; their BIRDs and agents keep running", strings.Join(cut, ", "), opts.Stagger)
	}
	for i, n := range cut {
		if i > 0 {
			if err := sleep(ctx, opts.Stagger); err != nil {
				return res, err
			}
		}
		if p := paths[n]; p != nil {
			p.Cut()
		}
		if a := opts.GossipAgents[n]; a != nil && opts.AgentsLoseAPI {
			if err := a.CutAPI(); err != nil {
				return res, err
			}
		}
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range cut {
		if err := c.WaitNodeReady(ctx, n, false, grace+time.Minute); err != nil {
			return res, err
		}
	}
	tl.Step("%s NotReady; hold %s", strings.Join(cut, ", "), opts.Hold)
	if err := sleep(ctx, opts.Hold); err != nil {
		return res, err
	}

	// The window's end: what the set, the BIRDs and the audit log show.
	if sn, err := c.Client.CoreV1().Nodes().Get(ctx, survivor, metav1.GetOptions{}); err != nil {
		return res, err
	} else if ready, since := kubestatus.NodeReadySince(sn); !ready || since.After(windowStart) {
		return res, fmt.Errorf("S10 did not play: %s, the node the API still hears, was not Ready throughout (Ready=%v since %s)", survivor, ready, since)
	}
	removed, how, err := rec.removals()
	if err != nil {
		return res, err
	}
	for _, n := range sortedKeys(removed) {
		res.Removed[n] = fmt.Sprintf("%s at +%.1fs", how[n], removed[n].Sub(windowStart).Seconds())
	}
	for _, n := range labNodes {
		now, err := os.ReadFile(n.MeshPath)
		if err != nil {
			return res, err
		}
		if string(now) != string(meshBefore[n.Name]) {
			res.MeshChanges++
		}
		for _, p := range birdlab.Others(labNodes, n) {
			if ok, _, _ := birdlab.Established(ctx, n, []*birdlab.Node{p}); !ok {
				res.LostSessions = append(res.LostSessions, n.Name+"->"+p.Name)
			}
		}
	}
	set, err := PublishedSet(ctx, c.Client, opts.PeerSet)
	if err != nil {
		return res, err
	}
	if set != nil {
		for _, p := range set.Peers {
			if slices.Contains(cut, p.Name) {
				res.Reasons[p.Name] = p.Reason
			}
		}
	}
	deleted, err := criticalDeletes(c, opts.User, workloads)
	if err != nil {
		return res, err
	}
	res.Deleted = deleted
	for _, w := range workloads {
		for _, d := range deleted {
			if isPodOf(d, w) {
				res.Replaced = append(res.Replaced, w.String())
			}
		}
	}
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	for _, p := range pods.Items {
		if !slices.ContainsFunc(workloads, func(w Workload) bool { return isPodOf(p.Name, w) }) || p.DeletionTimestamp != nil {
			continue
		}
		switch p.Spec.NodeName {
		case "":
			res.Pending = append(res.Pending, p.Name)
		case survivor:
			res.OnSurvivor = append(res.OnSurvivor, p.Name)
		}
	}
	allDown, err := lastNotReady(ctx, c.Client, cut)
	if err != nil {
		return res, fmt.Errorf("at the window's end: %w", err)
	}
	tl.Step("window over: %d peer(s) removed, %d session(s) lost, %d pod(s) deleted %v, %d Pending, on %s: %v",
		len(res.Removed), len(res.LostSessions), len(res.Deleted), res.Deleted, len(res.Pending), survivor, res.OnSurvivor)
	stopWatch()

	// The heal.
	tl.Step("start %s again", strings.Join(cut, ", "))
	for _, n := range cut {
		if p := paths[n]; p != nil {
			p.Restore()
		}
		if a := opts.GossipAgents[n]; a != nil && opts.AgentsLoseAPI {
			if err := a.RestoreAPI(); err != nil {
				return res, err
			}
		}
		if err := c.StartNode(ctx, n); err != nil {
			return res, err
		}
	}
	for _, n := range cut {
		if err := c.WaitNodeReady(ctx, n, true, grace+time.Minute); err != nil {
			return res, err
		}
	}
	back, err := firstReady(ctx, c.Client, cut)
	if err != nil {
		return res, fmt.Errorf("after the heal: %w", err)
	}
	res.AllNotReady = back.Sub(allDown)
	for _, w := range workloads {
		if err := waitAvailable(ctx, c, w, time.Minute); err != nil {
			return res, err
		}
		if res.After[w.String()], err = podUIDs(ctx, c, w); err != nil {
			return res, err
		}
	}
	all, err := criticalDeletes(c, opts.User, workloads)
	if err != nil {
		return res, err
	}
	res.DeletedThroughHeal = len(all)
	tl.Step("every node back and every workload available; %d pod(s) deleted in all", res.DeletedThroughHeal)
	return res, nil
}

// s10Request is share of the survivor's allocatable CPU, checked to be
// more than half of what is free there and no more than all of it, with
// what is free.
func s10Request(ctx context.Context, c *sandbox.Cluster, survivor string, share float64) (resource.Quantity, resource.Quantity, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, survivor, metav1.GetOptions{})
	if err != nil {
		return resource.Quantity{}, resource.Quantity{}, err
	}
	alloc := n.Status.Allocatable.Cpu().MilliValue()
	if alloc == 0 {
		return resource.Quantity{}, resource.Quantity{}, fmt.Errorf("%s reports no allocatable cpu", survivor)
	}
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + survivor})
	if err != nil {
		return resource.Quantity{}, resource.Quantity{}, err
	}
	used := int64(0)
	for _, p := range pods.Items {
		for _, ct := range p.Spec.Containers {
			used += ct.Resources.Requests.Cpu().MilliValue()
		}
	}
	free := alloc - used
	req := int64(share * float64(alloc))
	if 2*req <= free || req > free {
		return resource.Quantity{}, resource.Quantity{}, fmt.Errorf("S10: a request of %dm cpu on %s (%dm free of %dm) must fit exactly once", req, survivor, free, alloc)
	}
	return *resource.NewMilliQuantity(req, resource.DecimalSI), *resource.NewMilliQuantity(free, resource.DecimalSI), nil
}

// criticalDeletes lists the workloads' pods user deleted, from the
// apiserver's audit log.
func criticalDeletes(c *sandbox.Cluster, user string, workloads []Workload) ([]string, error) {
	evs, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		return e.Verb == "delete" && e.ObjectRef.Resource == "pods" && e.User.Username == user && e.ResponseStatus.Code < 300
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range evs {
		if slices.ContainsFunc(workloads, func(w Workload) bool { return e.ObjectRef.Namespace == w.Namespace && isPodOf(e.ObjectRef.Name, w) }) {
			out = append(out, e.ObjectRef.Name)
		}
	}
	return out, nil
}

// waitLabelled waits until every named node is labelled in the set.
func waitLabelled(ctx context.Context, c *sandbox.Cluster, names []string) error {
	return birdlab.Poll(ctx, 200*time.Millisecond, 30*time.Second, "every node labelled in the set", func() (bool, string) {
		for _, name := range names {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || n.Labels[peering.LabelInSet] != "true" {
				return false, name
			}
		}
		return true, ""
	})
}

// waitAvailable waits until the workload's Deployment has every replica
// available.
func waitAvailable(ctx context.Context, c *sandbox.Cluster, w Workload, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		return kubestatus.DeploymentAvailable(d) && d.Status.AvailableReplicas >= kubestatus.Replicas(d.Spec.Replicas), nil
	})
	if err != nil {
		return fmt.Errorf("%s not available within %s: %w", w, timeout, err)
	}
	return nil
}
