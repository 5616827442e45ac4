package scenario

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"rebound/api/v1alpha1"
	"rebound/internal/lab/sandbox"
)

// S16 is "a control plane that one node still reaches": the control-plane
// node's kubelet and agent talk to their local apiserver, while the
// workers' path to it fails (the load balancer in front of the API
// servers, or the route to it). Every worker's kubelet and agent lose the
// API in the same second, for longer than the node grace plus the
// policy's maxUnavailableTime; gossip between every agent goes on.
// kube-controller-manager sees most of the zone NotReady
// (PartialDisruption) and evicts nothing. Gossip says every worker lives,
// and the one node that reaches the API sees it first-hand: rebound must
// delete none of the workers' critical pods (coredns-like, tolerating the
// control-plane taint: an early delete would pile every replica on the
// one node that keeps the API alive), take no peer out of the published
// set and mark no node. Every pod keeps its UID through the heal. A
// worker whose host really dies meanwhile (Dies) is still rescued, after
// the policy.
//
// The caller starts `rebound controller --lease-plane --peering` under a
// policy that makes kube-system's system-cluster-critical pods critical,
// and gossiping agents with their own API paths (StartGossipAgents with
// OwnAPIPaths).

// ControlPlaneTaint is the taint kubeadm puts on a control-plane node.
const ControlPlaneTaint = "node-role.kubernetes.io/control-plane"

// S16Options tune RunS16.
type S16Options struct {
	// ControlPlane is the node that keeps reaching the API (default
	// node-0); every other node is a worker that loses it.
	ControlPlane string
	// Agents are the nodes' gossiping agents, each with its own API path.
	Agents map[string]*GossipAgent
	// Window is how long the workers stay cut off, from the cut to the
	// heal.
	Window time.Duration
	// Dies names a worker whose host dies DieAfter after the cut: its
	// host stand-in goes silent and its agent stops. It never comes back.
	Dies     string
	DieAfter time.Duration
	// RescueTimeout bounds the wait, from the death, for the dead
	// worker's critical pod to be Ready elsewhere (default: the node
	// grace plus 2 minutes).
	RescueTimeout time.Duration
	// PeerSet is the published peer set to watch for removals.
	PeerSet types.NamespacedName
	// User is the controller's identity, to count its deletions and node
	// writes in the apiserver's audit log.
	User string
}

// S16Result is what RunS16 found. Times are the API's.
type S16Result struct {
	Workloads []Workload
	// Before and After map each workload to its live pods' UIDs, before
	// the cut and once the workers are back.
	Before, After map[string][]types.UID
	// Deleted lists the live workers' critical pods the controller
	// deleted, from the cut through the heal (the audit log);
	// DeletedInWindow those before the heal.
	Deleted, DeletedInWindow []string
	// RemovedPeers are the nodes that left the published set from the cut
	// through the heal (the dead worker's removals after its death are
	// not counted: it is dead).
	RemovedPeers []string
	// Marked are the live nodes the controller wrote rebound's taint on
	// (the audit log's request bodies), from the cut through the heal;
	// DeadMarked whether it marked the dead worker.
	Marked     []string
	DeadMarked bool
	// DiedAt is the dead worker's death as the API dates it (the
	// creationTimestamp of the Event the lab wrote in that instant);
	// DeadRescued is from it to its critical pod's replacement's Ready
	// transition; DeadDeleted its pods the controller deleted.
	DiedAt      time.Time
	DeadRescued time.Duration
	DeadDeleted []string
}

// S16Workloads are the coredns-like critical Deployments: one per worker,
// each preferring its worker and tolerating the control-plane taint.
func S16Workloads(c *sandbox.Cluster, controlPlane string) []Workload {
	var ws []Workload
	for _, n := range c.NodeNames {
		if n == controlPlane {
			continue
		}
		w := CriticalStandIn(n)
		w.Name = "s16-dns-" + n
		w.Tolerations = []corev1.Toleration{{Key: ControlPlaneTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		ws = append(ws, w)
	}
	return ws
}

// MakeControlPlane labels and taints node as kubeadm does a control-plane
// node.
func MakeControlPlane(ctx context.Context, c *sandbox.Cluster, node string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n.Labels[ControlPlaneTaint] = ""
		if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ControlPlaneTaint }) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ControlPlaneTaint, Effect: corev1.TaintEffectNoSchedule})
		}
		_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil //nolint:nilerr // a conflict: read again
	})
}

// RunS16 plays S16 on a running sandbox of at least 3 nodes.
func RunS16(ctx context.Context, c *sandbox.Cluster, tl *Timeline, opts S16Options) (S16Result, error) {
	if opts.ControlPlane == "" {
		opts.ControlPlane = c.NodeNames[0]
	}
	grace := c.Timings.NodeMonitorGracePeriod
	if opts.RescueTimeout == 0 {
		opts.RescueTimeout = grace + 2*time.Minute
	}
	res := S16Result{After: map[string][]types.UID{}}
	var workers []string
	for _, n := range c.NodeNames {
		if n != opts.ControlPlane {
			workers = append(workers, n)
		}
	}
	if len(workers) < 2 {
		return res, fmt.Errorf("S16 needs at least 3 nodes, the sandbox has %d", len(c.NodeNames))
	}
	for _, n := range workers {
		if a := opts.Agents[n]; a == nil || a.API == nil {
			return res, fmt.Errorf("S16: %s has no agent with an API path of its own to cut", n)
		}
	}
	if opts.Dies != "" && !slices.Contains(workers, opts.Dies) {
		return res, fmt.Errorf("S16: the worker to die, %q, is not one of %v", opts.Dies, workers)
	}

	tl.Step("%s is the control-plane node (taint %s:NoSchedule)", opts.ControlPlane, ControlPlaneTaint)
	if err := MakeControlPlane(ctx, c, opts.ControlPlane); err != nil {
		return res, err
	}
	res.Workloads = S16Workloads(c, opts.ControlPlane)
	var err error
	if res.Before, err = deployRecorded(ctx, c, tl, res.Workloads); err != nil {
		return res, err
	}
	peers, err := watchPeerRemovals(ctx, c, opts.PeerSet)
	if err != nil {
		return res, err
	}

	// The cut: every worker's kubelet and agent in the same second.
	tl.Step("the kubelets and agents of %s lose the API; %s's keep it; gossip goes on", strings.Join(workers, ", "), opts.ControlPlane)
	from := time.Now()
	for _, n := range workers {
		if err := opts.Agents[n].CutAPI(); err != nil {
			return res, err
		}
		if err := c.StopNode(ctx, n); err != nil {
			return res, err
		}
	}
	tl.Step("cut in %s", time.Since(from).Round(time.Millisecond))

	if opts.Dies != "" {
		if err := sleep(ctx, time.Until(from.Add(opts.DieAfter))); err != nil {
			return res, err
		}
		tl.Step("%s's host dies: its host stand-in goes silent, its agent stops", opts.Dies)
		if res.DiedAt, err = markDeath(ctx, c, opts.Dies); err != nil {
			return res, err
		}
		if err := opts.Agents[opts.Dies].HostDeath(); err != nil {
			return res, err
		}
		peers.ignoreFrom(opts.Dies, res.DiedAt)
	}
	for _, n := range workers {
		if err := c.WaitNodeReady(ctx, n, false, grace+time.Minute); err != nil {
			return res, err
		}
	}
	tl.Step("the workers NotReady; hold until %s after the cut", opts.Window)
	reports, err := reportVersions(ctx, c, workers)
	if err != nil {
		return res, err
	}
	if err := sleep(ctx, time.Until(from.Add(opts.Window))); err != nil {
		return res, err
	}
	// The cut held: no worker's agent wrote its report meanwhile.
	if now, err := reportVersions(ctx, c, workers); err != nil {
		return res, err
	} else if !maps.Equal(reports, now) {
		return res, fmt.Errorf("S16 did not play: a cut-off agent wrote its PeeringReport (resourceVersions %v, then %v)", reports, now)
	}

	var dead *Workload
	if opts.Dies != "" {
		for i := range res.Workloads {
			if res.Workloads[i].PreferNode == opts.Dies {
				dead = &res.Workloads[i]
			}
		}
		var ready time.Time
		var last error
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Until(res.DiedAt.Add(opts.RescueTimeout)), true, func(ctx context.Context) (bool, error) {
			ready, last = readyPodSinceOffNode(ctx, c, *dead, opts.Dies)
			return last == nil, nil
		})
		if err != nil {
			return res, fmt.Errorf("S16: %s, whose node died, not Ready elsewhere within %s of the death: %w (last read: %v)", dead, opts.RescueTimeout, err, last)
		}
		res.DeadRescued = ready.Sub(res.DiedAt)
		tl.Step("%s Ready elsewhere %s after %s's death (API)", dead, res.DeadRescued, opts.Dies)
	}
	if sn, err := c.Client.CoreV1().Nodes().Get(ctx, opts.ControlPlane, metav1.GetOptions{}); err != nil {
		return res, err
	} else if !readyThroughout(sn, from) {
		return res, fmt.Errorf("S16 did not play: %s, the node that reaches the API, was not Ready throughout", opts.ControlPlane)
	}
	if res.DeletedInWindow, _, err = s16Deletes(c, opts.User, res.Workloads, opts.Dies); err != nil {
		return res, err
	}
	when, err := deleteTimes(c, opts.User, res.Workloads, from)
	if err != nil {
		return res, err
	}
	tl.Step("window over: %d live worker pod(s) deleted %v (after the cut: %v), peers removed %v", len(res.DeletedInWindow), res.DeletedInWindow, when, peers.removed())

	// The heal: the workers that live reach the API again.
	var back []string
	for _, n := range workers {
		if n == opts.Dies {
			continue
		}
		if err := opts.Agents[n].RestoreAPI(); err != nil {
			return res, err
		}
		if err := c.StartNode(ctx, n); err != nil {
			return res, err
		}
		back = append(back, n)
	}
	tl.Step("%s reach the API again", strings.Join(back, ", "))
	for _, n := range back {
		if err := c.WaitNodeReady(ctx, n, true, grace+time.Minute); err != nil {
			return res, err
		}
	}
	for _, w := range res.Workloads {
		if err := waitAvailable(ctx, c, w, time.Minute); err != nil {
			return res, err
		}
		if res.After[w.String()], err = podUIDs(ctx, c, w); err != nil {
			return res, err
		}
	}
	if res.Deleted, res.DeadDeleted, err = s16Deletes(c, opts.User, res.Workloads, opts.Dies); err != nil {
		return res, err
	}
	marked, err := UnreachableMarks(c, opts.User, from)
	if err != nil {
		return res, err
	}
	for _, n := range marked {
		if n == opts.Dies {
			res.DeadMarked = true
			continue
		}
		res.Marked = append(res.Marked, n)
	}
	res.RemovedPeers = peers.removed()
	if opts.Dies != "" {
		tl.Step("the dead %s: marked %v, its workload's pods deleted %v", opts.Dies, res.DeadMarked, res.DeadDeleted)
	}
	tl.Step("every worker that lives back, every workload available: %d pod(s) deleted %v, %d node(s) marked %v, peers removed %v",
		len(res.Deleted), res.Deleted, len(res.Marked), res.Marked, res.RemovedPeers)
	return res, nil
}

// readyThroughout says whether n has been Ready since before from.
func readyThroughout(n *corev1.Node, from time.Time) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue && !cond.LastTransitionTime.After(from)
		}
	}
	return false
}

// s16Deletes splits the controller's deletions of the workloads' pods
// into those of the live workers and those of the dead one's workload.
func s16Deletes(c *sandbox.Cluster, user string, ws []Workload, dead string) (live, ofDead []string, err error) {
	all, err := criticalDeletes(c, user, ws)
	if err != nil {
		return nil, nil, err
	}
	for _, pod := range all {
		if dead != "" && slices.ContainsFunc(ws, func(w Workload) bool { return w.PreferNode == dead && isPodOf(pod, w) }) {
			ofDead = append(ofDead, pod)
			continue
		}
		live = append(live, pod)
	}
	return live, ofDead, nil
}

// UnreachableMarks are the nodes user wrote rebound's taint on at or
// after from, as the apiserver's audit log has it: successful Node
// writes whose body carries the taint's key. A write that removes the
// taint does not carry it.
func UnreachableMarks(c *sandbox.Cluster, user string, from time.Time) ([]string, error) {
	evs, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		o := e.ObjectRef
		return e.User.Username == user && e.ResponseStatus.Code < 300 && !e.StageTimestamp.Time.Before(from) &&
			o.Resource == "nodes" && o.Subresource == "" && (e.Verb == "patch" || e.Verb == "update") &&
			bytes.Contains(e.RequestObject, []byte(`"`+UnreachableTaint+`"`))
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range evs {
		if !slices.Contains(out, e.ObjectRef.Name) {
			out = append(out, e.ObjectRef.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// markDeath writes an Event on node saying its host died now, and returns
// the API's time of it: the death as the API dates it, to measure from
// with the API's own timestamps.
func markDeath(ctx context.Context, c *sandbox.Cluster, node string) (time.Time, error) {
	return markEvent(ctx, c, node, "LabHostDeath", "the lab: the node's host dies (its host stand-in goes silent, its agent stops)")
}

// deleteTimes says when, after from, user deleted each of the workloads'
// pods (the audit log's completion times).
func deleteTimes(c *sandbox.Cluster, user string, ws []Workload, from time.Time) ([]string, error) {
	evs, err := c.AuditEvents(func(e sandbox.AuditEvent) bool {
		return e.Verb == "delete" && e.ObjectRef.Resource == "pods" && e.User.Username == user && e.ResponseStatus.Code < 300 &&
			slices.ContainsFunc(ws, func(w Workload) bool { return isPodOf(e.ObjectRef.Name, w) })
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("+%.1fs", e.StageTimestamp.Sub(from).Seconds()))
	}
	return out, nil
}

// reportVersions are the resourceVersions of the nodes' PeeringReports
// ("" for none).
func reportVersions(ctx context.Context, c *sandbox.Cluster, nodes []string) (map[string]string, error) {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes {
		r, err := dyn.Resource(v1alpha1.PeeringReports).Get(ctx, n, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out[n] = ""
		case err != nil:
			return nil, fmt.Errorf("read %s's PeeringReport: %w", n, err)
		default:
			out[n] = r.GetResourceVersion()
		}
	}
	return out, nil
}
