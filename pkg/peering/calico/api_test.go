package calico

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestChooseAPIGroup: the group the BGPPeer goes to is the one calico-node's
// confd reads (libcalico-go's UsingV3CRDs), for every combination of
// served groups and settings; an explicit group that is not served, or a
// setting confd would misread, is an error that says so.
func TestChooseAPIGroup(t *testing.T) {
	for _, tc := range []struct {
		name               string
		setting            string
		v1Served, v3Served bool
		want               schema.GroupVersionKind
		reason             string // part of the reason, or of the error
	}{
		{"only v1 served (Calico up to 3.31)", APIGroupAuto, true, false, BGPPeerGVK, "only crd.projectcalico.org is served"},
		{"only v3 served (native v3 CRDs, Calico 3.32)", APIGroupAuto, false, true, BGPPeerV3GVK, "only projectcalico.org is served"},
		{"both served: v1, as confd reads", APIGroupAuto, true, true, BGPPeerGVK, "both groups are served"},
		{"empty setting is auto", "", true, true, BGPPeerGVK, "auto:"},
		{"neither served", APIGroupAuto, false, false, schema.GroupVersionKind{}, "serves neither crd.projectcalico.org nor projectcalico.org"},
		{"v3 forced where both are served", APIGroupV3, true, true, BGPPeerV3GVK, "set explicitly to projectcalico.org/v3"},
		{"v3 forced, any case (confd's EqualFold)", "ProjectCalico.org/V3", true, true, BGPPeerV3GVK, "set explicitly"},
		{"v1 forced where only v1 is served", APIGroupV1, true, false, BGPPeerGVK, "set explicitly to crd.projectcalico.org/v1"},
		{"v1 forced where both are served", APIGroupV1, true, true, BGPPeerGVK, "set explicitly"},
		{"v3 forced but not served", APIGroupV3, true, false, schema.GroupVersionKind{}, "does not serve projectcalico.org"},
		{"v1 forced but not served", APIGroupV1, false, true, schema.GroupVersionKind{}, "does not serve crd.projectcalico.org"},
		{"a value confd would take for v1", "projectcalico.org", true, true, schema.GroupVersionKind{}, "want one of auto, crd.projectcalico.org/v1, projectcalico.org/v3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseAPIGroup(tc.setting, tc.v1Served, tc.v3Served)
			if tc.want.Empty() {
				if err == nil || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("ChooseAPIGroup = %+v, %v; want an error with %q", got, err, tc.reason)
				}
				return
			}
			if err != nil || got.GVK != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("ChooseAPIGroup = %+v, %v; want %v with a reason containing %q", got, err, tc.want, tc.reason)
			}
			if got.APIGroup() != tc.want.GroupVersion().String() {
				t.Errorf("APIGroup() = %s, want %s", got.APIGroup(), tc.want.GroupVersion())
			}
			if p := BGPPeerAs(got.GVK, PeerOptions{}); p.GroupVersionKind() != tc.want || !SpecEqual(p, BGPPeer(PeerOptions{})) {
				t.Errorf("BGPPeerAs = %v with spec %v", p.GroupVersionKind(), p.Object["spec"])
			}
		})
	}
}

// groupList is a discovery that serves the named groups, or fails.
type groupList struct {
	names []string
	err   error
}

func (g groupList) ServerGroups() (*metav1.APIGroupList, error) {
	if g.err != nil {
		return nil, g.err
	}
	l := &metav1.APIGroupList{}
	for _, n := range g.names {
		l.Groups = append(l.Groups, metav1.APIGroup{Name: n})
	}
	return l, nil
}

// TestDiscoverAPIGroup: discovery looks at the group list (like
// libcalico-go, whatever kinds a group serves), and a failed discovery is
// an error, not confd's silent v1.
func TestDiscoverAPIGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       groupList
		setting string
		want    string
		err     string
	}{
		{"v1 among others", groupList{names: []string{"apps", Group, "rebound.dev"}}, APIGroupAuto, APIGroupV1, ""},
		{"v3 only", groupList{names: []string{"apps", V3Group}}, APIGroupAuto, APIGroupV3, ""},
		{"both", groupList{names: []string{V3Group, Group}}, APIGroupAuto, APIGroupV1, ""},
		{"both, v3 forced", groupList{names: []string{V3Group, Group}}, APIGroupV3, APIGroupV3, ""},
		{"a look-alike group is not Calico's", groupList{names: []string{"crd.projectcalico.org.example"}}, APIGroupAuto, "", "serves neither"},
		{"discovery fails", groupList{err: errors.New("connection refused")}, APIGroupAuto, "", "discover the API server's groups: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DiscoverAPIGroup(tc.d, tc.setting)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("DiscoverAPIGroup = %+v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got.APIGroup() != tc.want {
				t.Fatalf("DiscoverAPIGroup = %+v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestParseAPIGroup(t *testing.T) {
	for in, want := range map[string]string{"": APIGroupAuto, "auto": APIGroupAuto, "AUTO": APIGroupAuto, "crd.projectcalico.org/v1": APIGroupV1, " projectcalico.org/v3 ": APIGroupV3} {
		if got, err := ParseAPIGroup(in); err != nil || got != want {
			t.Errorf("ParseAPIGroup(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"v1", "projectcalico.org", "crd.projectcalico.org", "projectcalico.org/v1"} {
		if _, err := ParseAPIGroup(bad); err == nil || !strings.Contains(err.Error(), strings.Join(APIGroupValues, ", ")) {
			t.Errorf("ParseAPIGroup(%q): err = %v, want one naming the accepted values", bad, err)
		}
		if err := (PeerOptions{APIGroup: bad}).Validate(); err == nil {
			t.Errorf("PeerOptions{APIGroup: %q}.Validate() = nil", bad)
		}
	}
}
