package calico

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Calico's two Kubernetes APIs for the same resources:
//
//   - crd.projectcalico.org/v1: the CRDs of Calico's Kubernetes datastore;
//   - projectcalico.org/v3: calicoctl's API, served by the aggregated
//     calico-apiserver when installed (over the v1 CRDs), or, opt-in from
//     Calico 3.32 (tech preview), by native CRDs in that group, which are
//     then the datastore in place of the v1 ones.
//
// calico-node's confd reads exactly one of them, chosen once at its start
// by ChooseAPIGroup's rule; rebound writes its BGPPeer to the same one, or
// calico-node never sees it.
const (
	V3Group   = "projectcalico.org"
	V3Version = "v3"
)

// BGPPeerV3GVK is the BGPPeer of Calico's v3 API.
var BGPPeerV3GVK = schema.GroupVersionKind{Group: V3Group, Version: V3Version, Kind: "BGPPeer"}

// The values of APIGroupSetting (controller --calico-api-group).
const (
	// APIGroupAuto picks the group the way confd does when
	// CALICO_API_GROUP is unset.
	APIGroupAuto = "auto"
	// APIGroupV1 and APIGroupV3 force a group, as CALICO_API_GROUP does.
	APIGroupV1 = Group + "/" + Version
	APIGroupV3 = V3Group + "/" + V3Version
)

// APIGroupValues lists the accepted settings, for help and errors.
var APIGroupValues = []string{APIGroupAuto, APIGroupV1, APIGroupV3}

// ParseAPIGroup reads a setting: "" or "auto", crd.projectcalico.org/v1
// or projectcalico.org/v3 (any case, as confd compares). It returns the
// canonical spelling. confd itself takes any other non-empty
// CALICO_API_GROUP for crd.projectcalico.org/v1; rebound refuses it
// instead, since a typo there would silently pick v1.
func ParseAPIGroup(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return APIGroupAuto, nil
	}
	for _, v := range APIGroupValues {
		if strings.EqualFold(strings.TrimSpace(s), v) {
			return v, nil
		}
	}
	return "", fmt.Errorf("calico API group %q: want one of %s", s, strings.Join(APIGroupValues, ", "))
}

// APIGroupChoice is the group the BGPPeer is written to, and why.
type APIGroupChoice struct {
	// GVK is the BGPPeer's kind in the chosen group.
	GVK schema.GroupVersionKind
	// Reason says why, in words, naming the setting and what was served.
	Reason string
}

// APIGroup is the chosen group/version, e.g. crd.projectcalico.org/v1.
func (c APIGroupChoice) APIGroup() string { return c.GVK.GroupVersion().String() }

// ChooseAPIGroup picks the group confd reads, given the setting (one
// ParseAPIGroup accepts) and whether each group is served. It mirrors
// libcalico-go's UsingV3CRDs (libcalico-go/lib/backend/k8s/discovery.go in
// Calico v3.32.1's confd source), which confd's client (NewKubeClient in
// libcalico-go/lib/backend/k8s/client.go, through clientv3.New in
// confd/pkg/backends/calico/client.go) calls once at start:
//
//   - CALICO_API_GROUP set: projectcalico.org/v3 if it equals that
//     (case-insensitively), else crd.projectcalico.org/v1;
//   - unset: by API discovery of the server's groups, projectcalico.org/v3
//     only when projectcalico.org is served and crd.projectcalico.org is
//     not; crd.projectcalico.org/v1 in every other case, both served
//     included (the aggregated calico-apiserver over the v1 CRDs, or a
//     migration to native v3 CRDs that has not removed the v1 ones).
//
// Where confd falls back to v1 without looking (discovery failed), or
// writes to a group that is not served, rebound returns an error instead:
// a BGPPeer it cannot write, or that nobody reads, is worth saying so.
func ChooseAPIGroup(setting string, v1Served, v3Served bool) (APIGroupChoice, error) {
	setting, err := ParseAPIGroup(setting)
	if err != nil {
		return APIGroupChoice{}, err
	}
	served := func(b bool) string {
		if b {
			return "served"
		}
		return "not served"
	}
	what := fmt.Sprintf("%s %s, %s %s", Group, served(v1Served), V3Group, served(v3Served))
	switch setting {
	case APIGroupV1, APIGroupV3:
		gvk := BGPPeerGVK
		ok := v1Served
		if setting == APIGroupV3 {
			gvk, ok = BGPPeerV3GVK, v3Served
		}
		if !ok {
			return APIGroupChoice{}, fmt.Errorf("calico API group %s is set explicitly (controller --calico-api-group), but the API server does not serve %s (%s): install its CRDs, or set the group calico-node's confd reads (its CALICO_API_GROUP, or auto)", setting, gvk.Group, what)
		}
		return APIGroupChoice{GVK: gvk, Reason: fmt.Sprintf("set explicitly to %s, as CALICO_API_GROUP sets calico-node's (%s)", setting, what)}, nil
	}
	switch {
	case v1Served && v3Served:
		return APIGroupChoice{GVK: BGPPeerGVK, Reason: "auto: both groups are served, and calico-node's confd then reads " + APIGroupV1 + " (set the group explicitly where calico-node's CALICO_API_GROUP is " + APIGroupV3 + ")"}, nil
	case v1Served:
		return APIGroupChoice{GVK: BGPPeerGVK, Reason: "auto: only " + Group + " is served"}, nil
	case v3Served:
		return APIGroupChoice{GVK: BGPPeerV3GVK, Reason: "auto: only " + V3Group + " is served (Calico's native v3 CRDs), and calico-node's confd then reads " + APIGroupV3}, nil
	}
	return APIGroupChoice{}, fmt.Errorf("the API server serves neither %s nor %s: install Calico's CRDs or drop the Calico option", Group, V3Group)
}

// ErrDiscovery marks the errors of a discovery that failed, which a
// retry may fix, unlike a choice that failed.
var ErrDiscovery = errors.New("calico backend: discover the API server's groups")

// ServedGroups reports whether the server serves each of Calico's groups,
// by the same discovery call as libcalico-go (ServerGroups: the group
// list, whatever resources each group holds).
func ServedGroups(d discovery.ServerGroupsInterface) (v1Served, v3Served bool, err error) {
	groups, err := d.ServerGroups()
	if err != nil {
		return false, false, fmt.Errorf("%w: %w", ErrDiscovery, err)
	}
	v1Served, v3Served = servedIn(groups)
	return v1Served, v3Served, nil
}

func servedIn(groups *metav1.APIGroupList) (v1Served, v3Served bool) {
	if groups == nil {
		return false, false
	}
	for _, g := range groups.Groups {
		switch g.Name {
		case Group:
			v1Served = true
		case V3Group:
			v3Served = true
		}
	}
	return v1Served, v3Served
}

// DiscoverAPIGroup is ChooseAPIGroup over the server's discovery.
func DiscoverAPIGroup(d discovery.ServerGroupsInterface, setting string) (APIGroupChoice, error) {
	v1, v3, err := ServedGroups(d)
	if err != nil {
		return APIGroupChoice{}, err
	}
	return ChooseAPIGroup(setting, v1, v3)
}

// Annotations of the published peer-set ConfigMap in which the
// controller says where its BGPPeer goes, for `rebound diagnose` and
// people: the group (empty when none could be chosen) and why.
const (
	AnnotationAPIGroup       = "peering.rebound.dev/calico-api-group"
	AnnotationAPIGroupReason = "peering.rebound.dev/calico-api-group-reason"
)

// BGPPeerAs is BGPPeer as an object of the given API (BGPPeerGVK or
// BGPPeerV3GVK); the spec is the same in both.
func BGPPeerAs(gvk schema.GroupVersionKind, o PeerOptions) *unstructured.Unstructured {
	u := BGPPeer(o)
	u.SetGroupVersionKind(gvk)
	return u
}
