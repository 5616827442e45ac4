package e2e

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"rebound/internal/controller"
	"rebound/internal/lab/sandbox"
	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
)

var bgpPeersV3 = schema.GroupVersionResource{Group: calico.V3Group, Version: calico.V3Version, Resource: "bgppeers"}

// TestS4CalicoV3API: where the cluster serves Calico's native v3 API
// (projectcalico.org/v3 CRDs, Calico 3.32), the Calico backend writes its
// BGPPeer there, chosen by discovery, and keeps writing there once the
// crd.projectcalico.org/v1 CRDs are served too. (TestS4CalicoBackend covers
// a cluster with the v1 CRDs only.)
func TestS4CalicoV3API(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 2, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	installCalicoV3CRDs(ctx, t, c)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	startPeeringController(t, c, controller.PeeringOptions{
		Name:   "peering-calico-v3",
		Config: peering.Config{PruneGracePeriod: 2 * time.Second},
		State:  controllerState("rebound-peering-calico-v3"),
		Calico: &calico.PeerOptions{MaxRestartTime: 90 * time.Second},
	})

	var peer *unstructured.Unstructured
	poll(ctx, t, 30*time.Second, "v3 BGPPeer "+calico.DefaultPeerName, func() (bool, string) {
		peer, err = dyn.Resource(bgpPeersV3).Get(ctx, calico.DefaultPeerName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	spec, _, _ := unstructured.NestedStringMap(peer.Object, "spec")
	for k, v := range map[string]string{"nodeSelector": calico.InSetSelector, "peerSelector": calico.InSetSelector, "maxRestartTime": "90s"} {
		if spec[k] != v {
			t.Errorf("v3 BGPPeer spec.%s = %q, want %q", k, spec[k], v)
		}
	}

	// Both APIs served (the aggregated calico-apiserver over v1 CRDs
	// looks the same to discovery): v3 stays the one written. A drift
	// of the v3 object is repaired there, and no v1 object appears.
	installCalicoCRDs(ctx, t, c)
	if _, err := dyn.Resource(bgpPeersV3).Patch(ctx, calico.DefaultPeerName, types.MergePatchType, []byte(`{"spec":{"peerSelector":"all()"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A node change makes the controller reconcile.
	if err := c.StopNode(ctx, c.NodeNames[1]); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, time.Minute, "the v3 BGPPeer's selector restored", func() (bool, string) {
		p, err := dyn.Resource(bgpPeersV3).Get(ctx, calico.DefaultPeerName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		sel, _, _ := unstructured.NestedString(p.Object, "spec", "peerSelector")
		return sel == calico.InSetSelector, sel
	})
	if _, err := dyn.Resource(bgpPeers).Get(ctx, calico.DefaultPeerName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("crd.projectcalico.org/v1 BGPPeer: err = %v, want NotFound (v3 is served, only it is written)", err)
	}
}
