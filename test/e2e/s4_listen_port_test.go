package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"rebound/internal/controller"
	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// s4ListenPort is the BGP port every node's BIRD listens on in
// TestS4ListenPort: not 179, the same on every node, each on its address.
const s4ListenPort = 17900

// TestS4ListenPort tries what a user does: `rebound agent --listen-port P`
// on every node and nothing else about ports (no peering.rebound.dev/bgp-port
// annotation, the controller's default --bgp-port). The agents report P,
// the controller publishes it as each node's port, and the agents render
// their peers with it: every session comes up. BIRD 2 with the agents'
// defaults (BFD on). The agents are the built binary, as a DaemonSet runs it.
func TestS4ListenPort(t *testing.T) {
	bins := birdtest.Require(t, bird.Bird2)
	c := startSandbox(t, 3, sandbox.FastTimings())
	t.Parallel()
	ctx := testContext(t, 4*time.Minute)
	lab, err := birdlab.New(birdlab.Options{
		Bins: bins, Nodes: 3, Net: 15, Dir: shortDir(t), Include: true, Port: s4ListenPort, BFD: &bird.BFD{},
		NodeName: func(i int) string { return c.NodeNames[i] },
	})
	must(t, err)
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	for _, n := range lab.Nodes {
		// BIRD starts alone: only the agents' files can peer it.
		mesh, err := bird.RenderMesh(lab.MeshConfig(n, nil))
		must(t, err)
		must(t, os.WriteFile(n.MeshPath, mesh, 0o644))
		// The node's address, the way Calico records it; no port.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{peering.AnnotationCalicoIPv4: n.Address.String() + "/32"}}})
		_, err = c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		must(t, err)
	}
	must(t, scenario.EnsurePeeringReportCRD(ctx, c.Config))
	set := startPeeringController(t, c, controller.PeeringOptions{
		Name: "peering-listen-port", NodeSelector: labels.Everything(),
		State: controllerState("rebound-peering-listen-port"),
	})
	must(t, lab.StartAll(ctx))
	for _, n := range lab.Nodes {
		s4AgentProcess(t, c, n, set)
	}
	poll(ctx, t, 90*time.Second, "every session Established on the published ports", func() (bool, string) {
		for _, n := range lab.Nodes {
			if ok, missing, err := birdlab.Established(ctx, n, birdlab.Others(lab.Nodes, n)); !ok {
				return false, fmt.Sprintf("%s: no session with %s %v", n.Name, missing, err)
			}
		}
		return true, ""
	})
	doc, err := scenario.PublishedSet(ctx, c.Client, set)
	must(t, err)
	for _, p := range doc.Peers {
		if p.Port != s4ListenPort {
			t.Errorf("published port of %s is %d, want the agent's --listen-port %d", p.Name, p.Port, s4ListenPort)
		}
	}
}

// s4AgentProcess runs `rebound agent` (the built binary) for one lab node
// with only the flags a node's own setup gives, until the test ends.
func s4AgentProcess(t *testing.T, c *sandbox.Cluster, n *birdlab.Node, set types.NamespacedName) {
	t.Helper()
	agentProcess(t, c, n.Name,
		"--kubeconfig", c.Kubeconfig,
		"--node-name", n.Name,
		"--bird-version", "2",
		"--as", "64512",
		"--mesh-file", n.MeshPath,
		"--bird-socket", n.Socket,
		"--peer-set", set.Namespace+"/"+set.Name,
		"--listen-port", fmt.Sprint(s4ListenPort),
		"--health-addr", "", "--metrics-bind-address", "0",
		"--debounce", "200ms", "--status-interval", "1s",
	)
}
