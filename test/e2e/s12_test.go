package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"rebound/internal/agent"
	"rebound/internal/controller"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/pkg/kubestatus"
	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
	"rebound/pkg/unreachable"
	"rebound/pkg/zone"
)

var bgpConfigsV3 = bgpPeersV3.GroupVersion().WithResource("bgpconfigurations")

// TestS12ControllerDown: the Calico contract fails open. On Calico's real
// v3.32.1 CRDs, with Calico's node-to-node mesh off, the controller
// publishes its BGPPeer, leaves a dead node out (in-set=false), and is
// stopped. Then, with no controller:
//
//   - a node that joins is in the mesh: the BGPPeer (read back from the
//     API) selects it, although nobody labels it;
//   - the node left out returns Ready and its rejoin agent
//     (`rebound agent --rejoin-only`, with a token bound to a pod on that
//     node and deploy/agent/rejoin's RBAC and admission policy) puts it
//     back at once; s12_rejoin_without_controller is the time from its
//     Ready transition to the label change, both from the API's records
//     (whole seconds);
//   - nothing else changes: the agent touches no other node.
//
// When the controller returns it agrees: nobody leaves, the new node is
// labelled in.
func TestS12ControllerDown(t *testing.T) {
	t.Parallel()
	crds := requirePublishedCalicoCRDs(t)
	c := startSandbox(t, 3, sandbox.FastTimings())
	ctx := testContext(t, 5*time.Minute)
	installCRDs(ctx, t, c, crds)
	dyn, err := dynamic.NewForConfig(c.Config)
	must(t, err)
	// Both groups are served: calico-node reads crd.projectcalico.org/v1
	// then, and so does this test, where the controller writes.
	mesh := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.APIGroupV1, "kind": "BGPConfiguration",
		"metadata": map[string]any{"name": calico.DefaultBGPConfigurationName},
		"spec":     map[string]any{"nodeToNodeMeshEnabled": false},
	}}
	_, err = dyn.Resource(bgpConfigs).Create(ctx, mesh, metav1.CreateOptions{})
	must(t, err)
	must(t, scenario.InstallRejoin(ctx, c.Config))

	out := c.NodeNames[2]
	// The agent's pod is bound to its node before the node dies, as a
	// DaemonSet's is.
	token, err := scenario.RejoinToken(ctx, c, out)
	must(t, err)
	kubeconfig := filepath.Join(c.Dir, "rejoin-"+out+".kubeconfig")
	must(t, scenario.WriteTokenKubeconfig(c, token, kubeconfig))

	opts := controller.PeeringOptions{
		Name:   "peering-s12",
		Config: peering.Config{PruneGracePeriod: 2 * time.Second},
		State:  controllerState("rebound-peering-s12"),
		Calico: &calico.PeerOptions{},
	}
	ctrl, err := scenario.StartPeeringController(context.Background(), c, opts, testLogWriter(t))
	must(t, err)
	t.Cleanup(func() { _ = ctrl.Stop() })

	var peer *unstructured.Unstructured
	poll(ctx, t, 30*time.Second, "v1 BGPPeer "+calico.DefaultPeerName, func() (bool, string) {
		peer, err = dyn.Resource(bgpPeers).Get(ctx, calico.DefaultPeerName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	for _, f := range []string{"nodeSelector", "peerSelector"} {
		if sel, _, _ := unstructured.NestedString(peer.Object, "spec", f); sel != calico.InSetSelector {
			t.Fatalf("BGPPeer spec.%s = %q, want %q", f, sel, calico.InSetSelector)
		}
	}
	for _, n := range c.NodeNames {
		waitInSet(ctx, t, c, n, true, 30*time.Second)
	}
	must(t, c.StopNode(ctx, out))
	waitInSet(ctx, t, c, out, false, time.Minute)
	if meshed(ctx, t, c, dyn, out) {
		t.Fatalf("%s is labelled false but the BGPPeer still selects it", out)
	}

	// The controller goes away.
	must(t, ctrl.Stop())
	agentProcess(t, c, out, "--rejoin-only", "--node-name", out, "--kubeconfig", kubeconfig, "--health-addr", "")

	// A node joins: in the mesh without anyone labelling it.
	joined, err := scenario.AddNode(ctx, c, len(c.NodeNames), time.Minute)
	must(t, err)
	if v, ok := joined.Labels[peering.LabelInSet]; ok {
		t.Errorf("%s has %s=%q with no controller running", joined.Name, peering.LabelInSet, v)
	}
	if !meshed(ctx, t, c, dyn, joined.Name) {
		t.Errorf("the BGPPeer does not select %s, a node that joined while the controller was down", joined.Name)
	}

	// The node left out returns: its agent puts it back. A watch sees the
	// two changes with sub-second times, the API records them in whole
	// seconds.
	seen := watchRejoin(ctx, t, c, out)
	must(t, c.StartNode(ctx, out))
	must(t, c.WaitNodeReady(ctx, out, true, time.Minute))
	waitInSet(ctx, t, c, out, true, 30*time.Second)
	if readySeen, rejoinSeen := seen(); !readySeen.IsZero() && !rejoinSeen.IsZero() {
		metric(t, "s12_rejoin_without_controller_watched", float64(rejoinSeen.Sub(readySeen).Microseconds())/1000, "ms")
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, out, metav1.GetOptions{})
	must(t, err)
	ready, rejoined := scenario.RejoinedAt(n)
	if ready.IsZero() || rejoined.IsZero() {
		t.Fatalf("%s: Ready since %v, label written by the rejoin agent at %v (managedFields %v)", out, ready, rejoined, managers(n))
	}
	took := rejoined.Sub(ready)
	metric(t, "s12_rejoin_without_controller", took.Seconds(), "s")
	// Seconds, not the controller's return: a watch event and one patch,
	// read in whole seconds on both ends.
	if took < 0 || took > 5*time.Second {
		t.Errorf("%s rejoined %s after it turned Ready, want within 5 s", out, took)
	}
	if !meshed(ctx, t, c, dyn, out) {
		t.Errorf("the BGPPeer does not select %s after its agent put it back", out)
	}
	for _, name := range append(slices.Clone(c.NodeNames), joined.Name) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		if name != out && slices.Contains(managers(n), "rebound-rejoin") {
			t.Errorf("%s's rejoin agent wrote %s", out, name)
		}
	}

	// The controller returns and agrees: the new node is labelled in,
	// nobody is left out.
	startPeeringController(t, c, opts)
	waitInSet(ctx, t, c, joined.Name, true, 30*time.Second)
	for _, name := range c.NodeNames {
		if v, err := inSetLabel(ctx, c, name); err != nil || v != "true" {
			t.Errorf("after the controller's return %s has %s=%q (%v), want true", name, peering.LabelInSet, v, err)
		}
	}
}

// watchRejoin watches one node and returns a function that stops the
// watch and says when it first saw the node Ready and then labelled in.
func watchRejoin(ctx context.Context, t *testing.T, c *sandbox.Cluster, node string) func() (ready, rejoined time.Time) {
	t.Helper()
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	must(t, err)
	type seen struct{ ready, rejoined time.Time }
	done := make(chan seen, 1)
	go func() {
		var s seen
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			now := time.Now()
			if s.ready.IsZero() && kubestatus.NodeReady(n) {
				s.ready = now
			}
			if !s.ready.IsZero() && s.rejoined.IsZero() && n.Labels[peering.LabelInSet] == "true" {
				s.rejoined = now
			}
		}
		done <- s
	}()
	return func() (time.Time, time.Time) {
		w.Stop()
		s := <-done
		return s.ready, s.rejoined
	}
}

// meshed reports whether the BGPPeer, as stored, selects the node on both
// ends (nodeSelector and peerSelector), with Calico's selector semantics.
func meshed(ctx context.Context, t *testing.T, c *sandbox.Cluster, dyn dynamic.Interface, node string) bool {
	t.Helper()
	p, err := dyn.Resource(bgpPeers).Get(ctx, calico.DefaultPeerName, metav1.GetOptions{})
	must(t, err)
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	for _, f := range []string{"nodeSelector", "peerSelector"} {
		sel, _, _ := unstructured.NestedString(p.Object, "spec", f)
		ok, err := calico.Selects(sel, n.Labels)
		must(t, err)
		if !ok {
			return false
		}
	}
	return true
}

func managers(n *corev1.Node) []string {
	var out []string
	for _, mf := range n.ManagedFields {
		out = append(out, mf.Manager)
	}
	return out
}

// TestS12ControllerOnDeadNode: rebound survives what it rescues. Seven
// nodes, three of them control-plane. The controller Deployment of
// deploy/ (control-plane nodes only, required anti-affinity) runs its two
// pods on two of them (kwok runs them); two `rebound controller`
// processes with leader election stand for them. The four workers die
// (PartialDisruption: upstream evicts nothing), then the leader's node and
// the leader process with it. The other replica takes the Lease and,
// under the default RecoveryPolicy (which covers rebound-system), rescues
// the dead replica's pod onto the third control-plane node: anti-affinity
// keeps it off the survivor's. s12_controller_rescue is the time from the
// node's NotReady transition to the replacement's Ready one (API
// timestamps).
//
// Were only the survivor's node left (S1: 4 of 5 dead), required
// anti-affinity would have nowhere to put the replacement and pkg/rescue
// holds (NoTarget), by design: the survivor leads alone, and the
// replacement lands once a second control-plane node is back
// (docs/install.md explains the choice).
func TestS12ControllerOnDeadNode(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 7, sandbox.FastTimings())
	ctx := testContext(t, 6*time.Minute)
	controlPlane := c.NodeNames[:3]
	for _, name := range controlPlane {
		patch := `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}},"spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}]}}`
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		must(t, err)
	}
	cl := installRebound(ctx, t, c, repoPath(defaultPolicyFile))
	applyFiles(ctx, t, cl, false, repoPath("deploy/rbac/service_account.yaml"), repoPath("deploy/controller/deployment.yaml"))
	w := scenario.Workload{Namespace: "rebound-system", Name: "rebound-controller"}

	var pods []corev1.Pod
	poll(ctx, t, time.Minute, "both controller pods Ready on two control-plane nodes", func() (bool, string) {
		list, err := c.Client.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		nodes := map[string]bool{}
		for _, p := range pods {
			if ready, _ := kubestatus.PodReadySince(&p); ready && slices.Contains(controlPlane, p.Spec.NodeName) {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(pods) == 2 && len(nodes) == 2, strings.Join(podSummaries(pods), ", ")
	})
	dead, survivor := pods[0].Spec.NodeName, pods[1].Spec.NodeName
	target := ""
	for _, n := range controlPlane {
		if n != dead && n != survivor {
			target = n
		}
	}

	// The leader stands for the pod on the node that dies.
	leader := startController(t, c)
	waitLeaseHeld(ctx, t, c)
	follower := startController(t, c)

	// The workers first, so that the zone is in PartialDisruption (4 of
	// 7) before the controller's node goes NotReady: upstream then never
	// taints it, and only rebound can move the pod.
	obs := scenario.Observe(ctx, c, scenario.NewTimeline(testWriter(t)), w)
	for _, n := range c.NodeNames[3:] {
		must(t, c.StopNode(ctx, n))
	}
	if _, err := obs.WaitFor(ctx, c.Timings.NodeMonitorGracePeriod+2*time.Minute, "zone enters PartialDisruption", func(s scenario.Snapshot) bool {
		return s.Zones[zone.DisplayZone(c.ZoneKey)] == "PartialDisruption"
	}); err != nil {
		t.Fatal(err)
	}
	must(t, c.StopNode(ctx, dead))
	leader.stop(syscall.SIGKILL)
	must(t, c.WaitNodeReady(ctx, dead, false, time.Minute))

	var rec scenario.Recovery
	poll(ctx, t, s1PolicyTime+leaseDuration+90*time.Second, "the dead replica's pod replaced on "+target, func() (bool, string) {
		var err error
		rec, err = scenario.MeasureRecovery(ctx, c.Client, w, dead, time.Now())
		if err != nil {
			return false, err.Error()
		}
		return rec.Recovered, fmt.Sprintf("%+v", rec)
	})
	metric(t, "s12_controller_rescue", rec.Seconds, "s")
	if rec.PodNode != target {
		t.Errorf("replacement on %s, want %s (the control-plane node without a replica)", rec.PodNode, target)
	}
	// The policy time, the Lease's takeover and a pass, with slack for
	// the machine.
	if bound := s1PolicyTime + leaseDuration + 20*time.Second; rec.Seconds > bound.Seconds() {
		t.Errorf("the dead replica was replaced %.1f s after its node went NotReady, want under %s", rec.Seconds, bound)
	}
	deletes := podDeletesBy(t, c, sandbox.ReboundUser)
	if len(deletes) != 1 || deletes[0].ObjectRef.Namespace != w.Namespace {
		var what []string
		for _, d := range deletes {
			what = append(what, d.ObjectRef.Namespace+"/"+d.ObjectRef.Name)
		}
		t.Errorf("rebound deleted %v, want exactly the dead replica's pod (log %s:\n%s)", what, follower.log, tail(follower.log, 30))
	}
	var d appsv1.Deployment
	must(t, cl.Get(ctx, types.NamespacedName{Namespace: w.Namespace, Name: w.Name}, &d))
	t.Logf("controller Deployment: %d ready of %d; replacement %s on %s", d.Status.ReadyReplicas, *d.Spec.Replicas, rec.Pod, rec.PodNode)
}

// waitLeaseHeld waits until a replica holds the controller's Lease.
func waitLeaseHeld(ctx context.Context, t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases("rebound-system").Get(ctx, "rebound-controller", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Fatalf("no replica took the leader-election Lease: %v", err)
	}
}

// TestS12TaintClearedWithoutController: rebound's taint fails open. Five
// nodes with gossiping agents (deploy/gossip's identity, a token bound to
// each node) and `rebound controller --lease-plane`. node-3 dies outright
// (its Lease stops, its host goes silent, its agent is killed) and the
// controller marks it rebound.dev/unreachable:NoSchedule; then the
// controller stops, as a
// Deployment scaled to 0 does. node-3 returns: its agent starts again and
// its Lease renews. With no controller to take the mark off, node-3's own
// agent does, once the taint has outlived a renewal by its default
// --untaint-after, through deploy/gossip's RBAC and admission policy.
// s12_taint_cleared_without_controller is the time from the Lease's first
// renewal after the return (its renewTime) to a watch seeing the taint
// gone; the scenario bound is 15 s. The audit log shows the removal as the
// gossip identity's only Node write, on node-3.
func TestS12TaintClearedWithoutController(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 5, sandbox.FastTimings())
	ctx := testContext(t, 4*time.Minute)
	agents, ctrl := startS13Rebound(ctx, t, c, scenario.GossipAgentOptions{})
	waitGossipReports(ctx, t, c, agents)
	must(t, scenario.WaitEarlyJudgement(ctx, ctrl.log, time.Minute))

	// A host death: its kubelet port drops packets, its agent is gone
	// (a member killed while its host answers is no Dead vote).
	must(t, agents[s13Victim].Host.Silence())
	must(t, agents[s13Victim].Kill())
	must(t, c.StopNode(ctx, s13Victim))
	poll(ctx, t, time.Minute, s13Victim+" marked "+scenario.UnreachableTaint, func() (bool, string) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, s13Victim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return unreachable.Tainted(n) != nil, fmt.Sprint(n.Spec.Taints)
	})
	// The controller goes away (kubectl scale --replicas=0 sends SIGTERM).
	ctrl.stop(syscall.SIGTERM)

	lease, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, s13Victim, metav1.GetOptions{})
	must(t, err)
	stale := lease.Spec.RenewTime.Time
	cleared := watchTaintCleared(ctx, t, c, s13Victim)
	must(t, agents[s13Victim].Host.Revive())
	must(t, agents[s13Victim].Restart())
	must(t, c.StartNode(ctx, s13Victim))
	var renewed time.Time
	poll(ctx, t, time.Minute, s13Victim+"'s Lease renewed", func() (bool, string) {
		l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, s13Victim, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, fmt.Sprint(err)
		}
		renewed = l.Spec.RenewTime.Time
		return renewed.After(stale), renewed.String()
	})
	const bound = 15 * time.Second
	var gone time.Time
	select {
	case gone = <-cleared:
	case <-time.After(time.Until(renewed.Add(bound + 10*time.Second))):
		t.Fatalf("%s still carries %s %v after its Lease renewed, with no controller", s13Victim, scenario.UnreachableTaint, time.Since(renewed))
	}
	took := gone.Sub(renewed)
	metric(t, "s12_taint_cleared_without_controller", took.Seconds(), "s")
	config(t, "s12_untaint_after", agent.DefaultUntaintAfter.Seconds(), "s")
	if took > bound {
		t.Errorf("the taint came off %v after %s's Lease renewed, want within %v", took, s13Victim, bound)
	}
	if took < agent.DefaultUntaintAfter-time.Second {
		t.Errorf("the taint came off %v after the renewal, before --untaint-after %v: the agent did not leave the controller its time", took, agent.DefaultUntaintAfter)
	}

	// Who wrote: the gossip identity patched node-3, and no other Node.
	gossipUser := "system:serviceaccount:" + scenario.AgentNamespace + ":" + scenario.GossipServiceAccount
	removal := func(e sandbox.AuditEvent) bool {
		return e.Verb == "patch" && e.ObjectRef.Name == s13Victim && e.ObjectRef.Subresource == "" && e.ResponseStatus.Code < 300
	}
	// The apiserver logs a write after it answered it: the watch saw the
	// removal first, so wait (with a deadline) for the log to hold it.
	auditCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	writes, err := c.WaitAuditEvents(auditCtx, func(e sandbox.AuditEvent) bool {
		return e.ObjectRef.Resource == "nodes" && e.User.Username == gossipUser && e.Verb != "get" && e.Verb != "list" && e.Verb != "watch"
	}, func(evs []sandbox.AuditEvent) bool { return slices.ContainsFunc(evs, removal) })
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	ok := 0
	for _, e := range writes {
		switch {
		case removal(e):
			ok++
		default:
			t.Errorf("the gossip identity's Node write %s %s/%s answered %d: want only the patch of %s", e.Verb, e.ObjectRef.Name, e.ObjectRef.Subresource, e.ResponseStatus.Code, s13Victim)
		}
	}
	if ok != 1 {
		t.Errorf("%d patches of %s by %s, want 1 (the removal)", ok, s13Victim, gossipUser)
	}
	for _, name := range c.NodeNames {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		if unreachable.Tainted(n) != nil {
			t.Errorf("%s still carries %s", name, scenario.UnreachableTaint)
		}
	}
}

// watchTaintCleared watches one node and sends when it first sees it
// without rebound's taint after having seen it with.
func watchTaintCleared(ctx context.Context, t *testing.T, c *sandbox.Cluster, node string) <-chan time.Time {
	t.Helper()
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	must(t, err)
	t.Cleanup(w.Stop)
	out := make(chan time.Time, 1)
	go func() {
		marked := false
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			if unreachable.Tainted(n) != nil {
				marked = true
				continue
			}
			if marked {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}
