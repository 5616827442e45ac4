package calico

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestBGPPeerSelectsTheSetOnBothEnds(t *testing.T) {
	p := BGPPeer(PeerOptions{MaxRestartTime: 90 * time.Second})
	if p.GetAPIVersion() != "crd.projectcalico.org/v1" || p.GetKind() != "BGPPeer" || p.GetName() != DefaultPeerName {
		t.Fatalf("object = %s %s %s", p.GetAPIVersion(), p.GetKind(), p.GetName())
	}
	spec := p.Object["spec"].(map[string]any)
	want := "peering.rebound.dev/in-set != 'false'"
	if spec["nodeSelector"] != want || spec["peerSelector"] != want || spec["maxRestartTime"] != "90s" {
		t.Errorf("spec = %v", spec)
	}
	if _, ok := BGPPeer(PeerOptions{}).Object["spec"].(map[string]any)["maxRestartTime"]; ok {
		t.Error("maxRestartTime set without being asked: Calico's default must stay")
	}
	if !SpecEqual(p, BGPPeer(PeerOptions{MaxRestartTime: 90 * time.Second})) || SpecEqual(p, BGPPeer(PeerOptions{})) {
		t.Error("SpecEqual does not compare specs")
	}
}

func TestPeerOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o     PeerOptions
		field string
	}{
		{PeerOptions{Name: "Bad_Name"}, "name"},
		{PeerOptions{MaxRestartTime: -time.Second}, "maxRestartTime"},
		{PeerOptions{MaxRestartTime: 5000 * time.Second}, "maxRestartTime"},
		{PeerOptions{MaxRestartTime: 1500 * time.Millisecond}, "whole seconds"},
	} {
		if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %v does not name %s", tc.o, err, tc.field)
		}
	}
	if err := (PeerOptions{Name: "rebound-peer-set", MaxRestartTime: 2 * time.Minute}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestMeshEnabled(t *testing.T) {
	if !MeshEnabled(nil) {
		t.Error("no BGPConfiguration: Calico's default is the mesh on")
	}
	if MeshEnabled(BGPConfiguration(false)) || !MeshEnabled(BGPConfiguration(true)) {
		t.Error("MeshEnabled does not read spec.nodeToNodeMeshEnabled")
	}
}

// The BGPPeer carries only the fields rebound owns. Calico's rules
// forbid asNumber and peerIP beside peerSelector and node beside
// nodeSelector, and nextHopMode supersedes keepOriginalNextHop (newer
// Calico refuses the two together), so rebound sets none of them and
// leaves the next hop to Calico's default.
func TestBGPPeerSetsOnlyItsOwnFields(t *testing.T) {
	owned := map[string]bool{"nodeSelector": true, "peerSelector": true, "maxRestartTime": true}
	for _, o := range []PeerOptions{{}, {MaxRestartTime: 4095 * time.Second}} {
		for k := range BGPPeer(o).Object["spec"].(map[string]any) {
			if !owned[k] {
				t.Errorf("%+v: BGPPeer sets spec.%s", o, k)
			}
		}
	}
}

func TestMeshOffPatch(t *testing.T) {
	var p struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal([]byte(MeshOffPatch), &p); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"nodeToNodeMeshEnabled": false, "nodeMeshMaxRestartTime": nil, "nodeMeshPassword": nil}
	if !reflect.DeepEqual(p.Spec, want) {
		t.Errorf("MeshOffPatch spec = %v, want %v: the mesh off, and the two mesh-only fields Calico's rules forbid beside it cleared", p.Spec, want)
	}
}

// The migration in docs/peering-calico.md and deploy/calico/mesh-off
// quote the patch TestCalicoPublishedCRDs applies to Calico's own CRDs.
func TestMeshOffPatchIsTheDocumentedOne(t *testing.T) {
	for _, f := range []string{"../../../docs/peering-calico.md", "../../../deploy/calico/mesh-off/bgpconfiguration.yaml"} {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "'"+MeshOffPatch+"'") {
			t.Errorf("%s does not quote the mesh-off patch %s", f, MeshOffPatch)
		}
	}
}
