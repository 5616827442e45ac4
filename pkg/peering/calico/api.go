package calico

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Calico's two Kubernetes APIs for the same resources:
//
//   - crd.projectcalico.org/v1: the CRDs of Calico's Kubernetes datastore,
//     which calico-node reads unless the cluster runs native v3 CRDs;
//   - projectcalico.org/v3: calicoctl's API, served by the aggregated
//     calico-apiserver when installed (over the v1 CRDs), or, opt-in from
//     Calico 3.32 (tech preview), by native CRDs in that group, which are
//     then the datastore in place of the v1 ones.
//
// Where v3 is served it is the one to write: with the aggregated API server
// it validates and defaults before storing in the v1 CRDs, and with native
// CRDs it is what calico-node reads.
const (
	V3Group   = "projectcalico.org"
	V3Version = "v3"
)

// BGPPeerV3GVK is the BGPPeer of Calico's v3 API.
var BGPPeerV3GVK = schema.GroupVersionKind{Group: V3Group, Version: V3Version, Kind: "BGPPeer"}

// BGPPeerAPIs are the BGPPeer kinds rebound can write, preferred first.
var BGPPeerAPIs = []schema.GroupVersionKind{BGPPeerV3GVK, BGPPeerGVK}

// ServedBGPPeerAPI picks, by discovery (a RESTMapper), the BGPPeer API the
// cluster serves: projectcalico.org/v3 when served, else
// crd.projectcalico.org/v1. An error says when neither is served.
func ServedBGPPeerAPI(mapper meta.RESTMapper) (schema.GroupVersionKind, error) {
	var last error
	for _, gvk := range BGPPeerAPIs {
		_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			return gvk, nil
		}
		if !meta.IsNoMatchError(err) {
			return schema.GroupVersionKind{}, fmt.Errorf("discover %s: %w", gvk, err)
		}
		last = err
	}
	return schema.GroupVersionKind{}, fmt.Errorf("the API server serves neither %s nor %s BGPPeers: %w",
		BGPPeerV3GVK.GroupVersion(), BGPPeerGVK.GroupVersion(), last)
}

// BGPPeerAs is BGPPeer as an object of the given API (one of
// BGPPeerAPIs); the spec is the same in both.
func BGPPeerAs(gvk schema.GroupVersionKind, o PeerOptions) *unstructured.Unstructured {
	u := BGPPeer(o)
	u.SetGroupVersionKind(gvk)
	return u
}
