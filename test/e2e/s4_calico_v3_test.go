package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestS4CalicoV3API: where the cluster serves Calico's native v3 API alone
// (projectcalico.org/v3 CRDs, Calico 3.32), the Calico backend writes its
// BGPPeer there, chosen by discovery as calico-node's confd chooses; once
// the crd.projectcalico.org/v1 CRDs are served too it writes to v1, where
// confd reads then. The peer-set document says which group and why.
// (TestS4CalicoBackend covers a cluster with the v1 CRDs only.)
func TestS4CalicoV3API(t *testing.T) {
	t.Parallel()
	c := startSandbox(t, 2, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	installCalicoV3CRDs(ctx, t, c)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	doc := startPeeringController(t, c, controller.PeeringOptions{
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

	group, reason := publishedCalicoGroup(ctx, t, c, doc)
	if group != calico.APIGroupV3 || !strings.Contains(reason, "only projectcalico.org is served") {
		t.Errorf("peer-set document says group %q, reason %q; want %s, v3 alone served", group, reason, calico.APIGroupV3)
	}

	// Both APIs served (the v1 CRDs beside the native v3 ones, or the
	// aggregated calico-apiserver over v1 CRDs: the same to discovery):
	// calico-node's confd reads crd.projectcalico.org/v1 then, so the
	// controller writes its BGPPeer there at its next pass, and says so.
	installCalicoCRDs(ctx, t, c)
	// A node change makes the controller reconcile.
	if err := c.StopNode(ctx, c.NodeNames[1]); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, time.Minute, "the v1 BGPPeer, once v1 is served too", func() (bool, string) {
		p, err := dyn.Resource(bgpPeers).Get(ctx, calico.DefaultPeerName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		sel, _, _ := unstructured.NestedString(p.Object, "spec", "peerSelector")
		return sel == calico.InSetSelector, sel
	})
	poll(ctx, t, 30*time.Second, "the peer-set document naming v1", func() (bool, string) {
		group, reason := publishedCalicoGroup(ctx, t, c, doc)
		return group == calico.APIGroupV1 && strings.Contains(reason, "both groups are served"), group + ": " + reason
	})
}

// publishedCalicoGroup reads what the controller's peer-set document says
// about its Calico BGPPeer's API group, and why.
func publishedCalicoGroup(ctx context.Context, t *testing.T, c *sandbox.Cluster, doc types.NamespacedName) (group, reason string) {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(doc.Namespace).Get(ctx, doc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("peer-set document %s: %v", doc, err)
	}
	return cm.Annotations[calico.AnnotationAPIGroup], cm.Annotations[calico.AnnotationAPIGroupReason]
}
