package e2e

import (
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"rebound/internal/lab/birdlab"
	"rebound/internal/lab/confdlab"
	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering"
	"rebound/pkg/peering/bird"
)

// TestS12ControllerDownConfd is TestS12ControllerDown on Calico's own
// renderer: with the controller stopped, a node that joins is in every
// other node's bird.cfg as confd renders it. rebound's BGPPeer selects the
// nodes not labelled out (calico.InSetSelector), so a node no controller
// has labelled is in; what confd does with that is what this checks, on
// the real controller binary and Calico v3.32.1's confd. No BIRD runs:
// confd's check_cmd (`bird -p`) still parses every file it renders.
func TestS12ControllerDownConfd(t *testing.T) {
	bins := birdtest.Require(t, bird.Bird16)
	crds := requirePublishedCalicoCRDs(t)
	confd, src := requireConfd(t)
	t.Parallel()
	c := startSandbox(t, 3, sandbox.FastTimings())
	ctx := testContext(t, 5*time.Minute)
	must(t, confdlab.InstallCRDs(ctx, c.Config, crds, confdlab.V1))
	dyn, err := dynamic.NewForConfig(c.Config)
	must(t, err)
	must(t, confdlab.CreateCluster(ctx, dyn, confdlab.ClusterOptions{API: confdlab.V1, Mesh: true, Pool: scenario.S4CalicoPool}))

	// Four lab nodes: the sandbox's three and the one that joins later
	// (sandbox.NodeName(3)), which gets its Calico objects and confd only
	// once its Node exists, as calico-node starts on a new node.
	dir := shortDir(t)
	lab, err := birdlab.New(birdlab.Options{
		Bins: bins, Nodes: 4, Net: 53, Dir: dir,
		NodeName:       sandbox.NodeName,
		ExternalConfig: scenario.ConfdConfig(dir), ProtocolNames: confdlab.ProtocolNames,
	})
	must(t, err)
	t.Cleanup(func() { _ = lab.Close() })
	first, joiner := lab.Nodes[:3], lab.Nodes[3]
	for i, n := range first {
		if n.Name != c.NodeNames[i] {
			t.Fatalf("lab node %d is %s, the sandbox's is %s", i, n.Name, c.NodeNames[i])
		}
	}
	cs, err := scenario.NewConfds(c, lab, scenario.ConfdOptions{Binary: confd, Source: src, API: confdlab.V1, Dir: dir})
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rendered files:\n%s", cs.RenderedFiles())
		}
		_ = cs.Stop()
	})
	for _, n := range first {
		must(t, cs.Start(ctx, n))
	}

	// rebound's controller publishes its BGPPeer; the mesh goes off as
	// docs/peering-calico.md says.
	stopController := meshOffUnderRebound(ctx, t, c, dyn, first)
	for _, n := range first {
		confdRendersRebound(ctx, t, cs, n, birdlab.Others(first, n))
	}

	// The controller goes away (stop waits for its exit), and stays away.
	must(t, stopController())
	// A node joins: calico-node starts there (its annotations, its block,
	// its confd); no one labels it.
	joined, err := scenario.AddNode(ctx, c, 3, time.Minute)
	must(t, err)
	if joined.Name != joiner.Name {
		t.Fatalf("the node that joined is %s, the lab's fourth is %s", joined.Name, joiner.Name)
	}
	joinedAt := time.Now()
	must(t, cs.Start(ctx, joiner))
	for _, n := range first {
		confdRendersRebound(ctx, t, cs, n, birdlab.Others(lab.Nodes, n))
	}
	// Until the last of the others' files was written, by the files' own
	// modification times (not when this test's poll saw them).
	var rendered time.Time
	for _, n := range first {
		st, err := os.Stat(scenario.ConfdConfig(dir)(n))
		must(t, err)
		if st.ModTime().After(rendered) {
			rendered = st.ModTime()
		}
	}
	metric(t, "s12_confd_joined_rendered", rendered.Sub(joinedAt).Seconds(), "s")
	confdRendersRebound(ctx, t, cs, joiner, first)
	n, err := c.Client.CoreV1().Nodes().Get(ctx, joiner.Name, metav1.GetOptions{})
	must(t, err)
	if v, ok := n.Labels[peering.LabelInSet]; ok {
		t.Errorf("%s has %s=%q with no controller running", joiner.Name, peering.LabelInSet, v)
	}
}
