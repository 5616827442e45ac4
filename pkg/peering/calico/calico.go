// Package calico is the Calico backend of the peer set: the objects that
// make calico-node's BIRD peer only with the nodes in rebound's set.
//
// The set itself is the node label peering.rebound.dev/in-set, which the
// controller maintains ("false" for the nodes left out; nodes without the
// label count as in). One Calico BGPPeer selects the nodes in the set on
// both ends (spec.nodeSelector and spec.peerSelector), so the mesh is a
// full mesh among the set; with Calico's node-to-node mesh switched off
// (BGPConfiguration spec.nodeToNodeMeshEnabled: false) a node that leaves
// the set drops out of every other node's BIRD configuration, and a BIRD
// restarting in graceful-restart recovery no longer waits for it
// (docs/peering-calico.md has the migration and the way back).
//
// The objects are built as unstructured crd.projectcalico.org/v1 objects,
// or projectcalico.org/v3 ones where calico-node reads that group (api.go
// picks the group as calico-node's confd does): rebound does not vendor
// Calico's types.
package calico

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rebound/pkg/peering"
)

// Group and version of Calico's CRDs (what calicoctl's projectcalico.org/v3
// resources are stored as in Kubernetes-datastore mode).
const (
	Group   = "crd.projectcalico.org"
	Version = "v1"
)

// GroupVersionKinds of the objects this package builds.
var (
	BGPPeerGVK          = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "BGPPeer"}
	BGPConfigurationGVK = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "BGPConfiguration"}
)

// DefaultPeerName is the name of the BGPPeer rebound owns.
const DefaultPeerName = "rebound-peer-set"

// DefaultBGPConfigurationName is the cluster-wide BGPConfiguration Calico
// reads.
const DefaultBGPConfigurationName = "default"

// InSetSelector is the Calico selector of the nodes in the set. It fails
// open: it selects every node that is not labelled "false", so a node
// without rebound's label (a node that joined while the controller was
// down, or every node once the labels are removed) is in the mesh, as it
// is in Calico's own node-to-node mesh. Only the controller's explicit
// "false" (NotReady past the prune grace, no BGP address) takes a node
// out. Calico's `k != 'v'` matches a node without k as well (libcalico-go's
// selector parser; Selects follows it), so no `!has(k) ||` is needed.
var InSetSelector = fmt.Sprintf("%s != 'false'", peering.LabelInSet)

// LabelManagedBy marks the objects rebound created.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// PeerOptions shape the BGPPeer.
type PeerOptions struct {
	// Name of the BGPPeer; "" means DefaultPeerName.
	Name string
	// MaxRestartTime is the peers' graceful restart time (BGPPeer
	// spec.maxRestartTime, rendered by Calico as BIRD's per-peer
	// `graceful restart time`); 0 leaves Calico's default (120 s).
	MaxRestartTime time.Duration
	// APIGroup is where the BGPPeer is written: APIGroupAuto ("" too)
	// picks the group calico-node's confd reads (ChooseAPIGroup);
	// APIGroupV1 or APIGroupV3 force one, as CALICO_API_GROUP forces
	// confd's.
	APIGroup string
}

// Validate names the bad field.
func (o PeerOptions) Validate() error {
	if o.Name != "" && !isDNSLabelish(o.Name) {
		return fmt.Errorf("calico peer name %q: want lower-case letters, digits, '-' and '.'", o.Name)
	}
	if o.MaxRestartTime < 0 || o.MaxRestartTime > 4095*time.Second {
		return fmt.Errorf("calico maxRestartTime %v: want 0 (Calico's default) up to 4095s", o.MaxRestartTime)
	}
	if o.MaxRestartTime%time.Second != 0 {
		return fmt.Errorf("calico maxRestartTime %v: want whole seconds", o.MaxRestartTime)
	}
	if _, err := ParseAPIGroup(o.APIGroup); err != nil {
		return err
	}
	return nil
}

// BGPPeer returns the BGPPeer that meshes the nodes of the set with each
// other: nodeSelector and peerSelector are both InSetSelector.
func BGPPeer(o PeerOptions) *unstructured.Unstructured {
	name := o.Name
	if name == "" {
		name = DefaultPeerName
	}
	spec := map[string]any{
		"nodeSelector": InSetSelector,
		"peerSelector": InSetSelector,
	}
	if o.MaxRestartTime > 0 {
		spec["maxRestartTime"] = strconv.Itoa(int(o.MaxRestartTime/time.Second)) + "s"
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":   name,
			"labels": map[string]any{LabelManagedBy: "rebound"},
		},
		"spec": spec,
	}}
	u.SetGroupVersionKind(BGPPeerGVK)
	return u
}

// BGPConfiguration returns the cluster-wide BGPConfiguration with the
// node-to-node mesh on or off: the switch of the migration.
func BGPConfiguration(meshEnabled bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": DefaultBGPConfigurationName},
		"spec":     map[string]any{"nodeToNodeMeshEnabled": meshEnabled},
	}}
	u.SetGroupVersionKind(BGPConfigurationGVK)
	return u
}

// MeshOffPatch is the JSON merge patch of the BGPConfiguration "default"
// that switches Calico's node-to-node mesh off (step 3 of the migration in
// docs/peering-calico.md). nodeMeshMaxRestartTime and nodeMeshPassword
// configure only the mesh, and Calico 3.32's CRDs refuse
// nodeToNodeMeshEnabled: false while either is set, so the patch clears
// both in the same write; a null for a field that is not set changes
// nothing, so the one patch fits every cluster. The same patch works
// through crd.projectcalico.org/v1, the v3 API server and the native v3
// CRDs: the field names are the same in both groups.
const MeshOffPatch = `{"spec":{"nodeToNodeMeshEnabled":false,"nodeMeshMaxRestartTime":null,"nodeMeshPassword":null}}`

// SpecEqual reports whether two objects have the same spec.
func SpecEqual(a, b *unstructured.Unstructured) bool {
	as, _, _ := unstructured.NestedMap(a.Object, "spec")
	bs, _, _ := unstructured.NestedMap(b.Object, "spec")
	return reflect.DeepEqual(as, bs)
}

// MeshEnabled reads spec.nodeToNodeMeshEnabled of a BGPConfiguration;
// Calico's default, when the field or the object is missing, is true.
func MeshEnabled(cfg *unstructured.Unstructured) bool {
	if cfg == nil {
		return true
	}
	v, found, err := unstructured.NestedBool(cfg.Object, "spec", "nodeToNodeMeshEnabled")
	if !found || err != nil {
		return true
	}
	return v
}

func isDNSLabelish(s string) bool {
	if len(s) > 253 || strings.Trim(s, "-.") != s {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
