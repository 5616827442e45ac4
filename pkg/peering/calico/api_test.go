package calico

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestServedBGPPeerAPI(t *testing.T) {
	for _, tc := range []struct {
		name   string
		served []schema.GroupVersionKind
		want   schema.GroupVersionKind
	}{
		{"v1 CRDs only (Calico up to 3.31)", []schema.GroupVersionKind{BGPPeerGVK}, BGPPeerGVK},
		{"native v3 CRDs only (opt-in from Calico 3.32)", []schema.GroupVersionKind{BGPPeerV3GVK}, BGPPeerV3GVK},
		{"v1 CRDs and the aggregated v3 API", []schema.GroupVersionKind{BGPPeerGVK, BGPPeerV3GVK}, BGPPeerV3GVK},
		{"no Calico", nil, schema.GroupVersionKind{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := meta.NewDefaultRESTMapper(nil)
			for _, gvk := range tc.served {
				m.Add(gvk, meta.RESTScopeRoot)
			}
			got, err := ServedBGPPeerAPI(m)
			if tc.want.Empty() {
				if err == nil || !meta.IsNoMatchError(err) || !strings.Contains(err.Error(), "projectcalico.org/v3") {
					t.Fatalf("err = %v, want a no-match error naming both APIs", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ServedBGPPeerAPI = %v, %v; want %v", got, err, tc.want)
			}
			if p := BGPPeerAs(got, PeerOptions{}); p.GroupVersionKind() != tc.want || !SpecEqual(p, BGPPeer(PeerOptions{})) {
				t.Errorf("BGPPeerAs = %v with spec %v", p.GroupVersionKind(), p.Object["spec"])
			}
		})
	}
}
