package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// calicoCRDsEnv names the folder of Calico's published CRDs when it is not
// the default.
const calicoCRDsEnv = "REBOUND_CALICO_CRDS"

// publishedCalicoCRDs is the folder of Calico v3.32.1's own BGPPeer and
// BGPConfiguration CRDs, both API groups, unmodified (with their CEL
// rules): $REBOUND_CALICO_CRDS, else <repo>/../shared/calico/v3.32.1.
// ok is false when the folder holds no CRDs.
func publishedCalicoCRDs() (dir string, ok bool) {
	dir = os.Getenv(calicoCRDsEnv)
	if dir == "" {
		// The tests run in test/e2e, two folders below the repository.
		dir = filepath.Join("..", "..", "..", "shared", "calico", "v3.32.1")
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	return dir, len(files) > 0
}

// requirePublishedCalicoCRDs returns the folder of Calico's published
// CRDs, or skips a test that means nothing without them.
func requirePublishedCalicoCRDs(t *testing.T) string {
	t.Helper()
	dir, ok := publishedCalicoCRDs()
	if !ok {
		t.Skipf("no Calico CRDs in %s (set %s to the folder of Calico v3.32.1's crd.projectcalico.org_*.yaml and projectcalico.org_*.yaml): this test checks rebound against Calico's own validation rules and has nothing to check without them", dir, calicoCRDsEnv)
	}
	return dir
}

// calicoCRDFiles are the CRD files of one API group in a folder laid out
// as Calico publishes it: <group>_<plural>.yaml.
func calicoCRDFiles(t *testing.T, dir, group string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, group+"_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s CRDs in %s: %v", group, dir, err)
	}
	return files
}

// calicoAPI is one of the two API groups Calico serves BGP resources in.
type calicoAPI struct {
	name    string
	peerGVK schema.GroupVersionKind
	peers   schema.GroupVersionResource
	configs schema.GroupVersionResource
}

var calicoAPIs = []calicoAPI{
	{calico.BGPPeerGVK.GroupVersion().String(), calico.BGPPeerGVK, bgpPeers, bgpConfigs},
	{calico.BGPPeerV3GVK.GroupVersion().String(), calico.BGPPeerV3GVK, bgpPeersV3, bgpConfigsV3},
}

// oldMeshOffPatch is the one-field patch the migration once documented.
const oldMeshOffPatch = `{"spec":{"nodeToNodeMeshEnabled":false}}`

// TestCalicoPublishedCRDs holds rebound's Calico writes to Calico
// v3.32.1's own CRDs (both API groups, with their CEL rules) on the
// sandbox's apiserver:
//
//   - the BGPPeer of the controller's backend (calico.BGPPeerAs, the
//     function the Calico publisher calls) is accepted by both, with strict field
//     validation, and stored as written; the controller itself writes the
//     same object, with both groups served, to crd.projectcalico.org/v1
//     (where calico-node's confd reads then) and not to v3, or to v3 when
//     told so, and its peer-set document says which and why;
//   - the rules are live: the fields only Calico Enterprise has and the
//     field combinations Calico forbids are refused;
//   - the migration's mesh-off patch (calico.MeshOffPatch, quoted by
//     docs/peering-calico.md) goes through on a BGPConfiguration "default"
//     that sets nodeMeshMaxRestartTime or nodeMeshPassword, where the old
//     one-field patch is refused by the rule that forbids them.
func TestCalicoPublishedCRDs(t *testing.T) {
	t.Parallel()
	dir := requirePublishedCalicoCRDs(t)
	c := startSandbox(t, 1, sandbox.FastTimings())
	ctx := testContext(t, 3*time.Minute)
	installCRDs(ctx, t, c, dir)
	dyn, err := dynamic.NewForConfig(c.Config)
	must(t, err)

	t.Run("BGPPeer accepted", func(t *testing.T) {
		for _, row := range []struct {
			name string
			opts calico.PeerOptions
		}{
			{"Calico's default restart time", calico.PeerOptions{Name: "rebound-default-restart"}},
			{"--calico-max-restart-time=120s", calico.PeerOptions{Name: "rebound-120s", MaxRestartTime: 120 * time.Second}},
			{"the longest restart time", calico.PeerOptions{Name: "rebound-4095s", MaxRestartTime: 4095 * time.Second}},
		} {
			must(t, row.opts.Validate())
			for _, api := range calicoAPIs {
				want := calico.BGPPeerAs(api.peerGVK, row.opts)
				got, err := dyn.Resource(api.peers).Create(ctx, want, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
				if err != nil {
					t.Errorf("%s, %s: the BGPPeer rebound writes is refused: %v", row.name, api.name, err)
					continue
				}
				// Accepted is not enough: a field the schema does not know
				// would be pruned, one it defaults would be added.
				if !calico.SpecEqual(got, want) {
					t.Errorf("%s, %s: stored spec %v, written %v", row.name, api.name, got.Object["spec"], want.Object["spec"])
				}
			}
		}
	})

	t.Run("BGPPeer rules enforced", func(t *testing.T) {
		for _, row := range []struct {
			name    string
			field   string
			value   any
			refused string
		}{
			{"BFD is Calico Enterprise's", "failureDetectionMode", "BFDIfDirectlyConnected", `unknown field "spec.failureDetectionMode"`},
			{"LLGR is Calico Enterprise's", "restartMode", "LongLivedGracefulRestart", `unknown field "spec.restartMode"`},
			{"peerIP beside peerSelector", "peerIP", "192.0.2.1", "peerIP and peerSelector cannot both be set"},
			{"asNumber beside peerSelector", "asNumber", int64(64512), "asNumber must be empty when peerSelector is set"},
			{"node beside nodeSelector", "node", "node-0", "node and nodeSelector cannot both be set"},
			{"a next-hop mode Calico does not have", "nextHopMode", "Always", "spec.nextHopMode"},
		} {
			for _, api := range calicoAPIs {
				bad := calico.BGPPeerAs(api.peerGVK, calico.PeerOptions{Name: "rebound-bad"})
				must(t, unstructured.SetNestedField(bad.Object, row.value, "spec", row.field))
				_, err := dyn.Resource(api.peers).Create(ctx, bad, metav1.CreateOptions{
					DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict,
				})
				if err == nil || !strings.Contains(err.Error(), row.refused) {
					t.Errorf("%s, %s: spec.%s=%v: err = %v, want it refused with %q", row.name, api.name, row.field, row.value, err, row.refused)
				}
			}
		}
	})

	t.Run("mesh off", func(t *testing.T) {
		const restartRule = "nodeMeshMaxRestartTime cannot be set when nodeToNodeMeshEnabled is false"
		const passwordRule = "nodeMeshPassword cannot be set when nodeToNodeMeshEnabled is false"
		password := map[string]any{"secretKeyRef": map[string]any{"name": "bgp-secrets", "key": "mesh-password"}}
		for _, row := range []struct {
			name string
			spec map[string]any
			// refusedBy are the rules' messages the old patch must meet.
			refusedBy []string
		}{
			{"nodeMeshMaxRestartTime set", map[string]any{"nodeToNodeMeshEnabled": true, "nodeMeshMaxRestartTime": "120s", "asNumber": int64(64512)}, []string{restartRule}},
			{"nodeMeshPassword set", map[string]any{"nodeMeshPassword": password}, []string{passwordRule}},
			{"both set", map[string]any{"nodeToNodeMeshEnabled": true, "nodeMeshMaxRestartTime": "300s", "nodeMeshPassword": password}, []string{restartRule, passwordRule}},
			{"neither set", map[string]any{"nodeToNodeMeshEnabled": true, "asNumber": int64(64512)}, nil},
		} {
			for _, api := range calicoAPIs {
				meshOff(ctx, t, dyn, api, row.spec, row.refusedBy)
			}
		}
	})

	// Both groups are served, as in a cluster mid-migration to Calico's
	// native v3 CRDs: calico-node's confd reads crd.projectcalico.org/v1
	// then, so that is where the controller writes, unless told otherwise.
	for _, row := range []struct {
		name, short, setting string
		want, notIn          schema.GroupVersionResource
		reason               string
	}{
		{"auto", "auto", calico.APIGroupAuto, bgpPeers, bgpPeersV3, "both groups are served"},
		{"--calico-api-group=projectcalico.org/v3", "v3", calico.APIGroupV3, bgpPeersV3, bgpPeers, "set explicitly to projectcalico.org/v3"},
	} {
		t.Run("the controller's BGPPeer, both groups served, "+row.name, func(t *testing.T) {
			opts := calico.PeerOptions{MaxRestartTime: 120 * time.Second, APIGroup: row.setting}
			want := calico.BGPPeer(opts)
			// Registered first, so run after the controller has stopped:
			// the next row starts from no BGPPeer in either group.
			t.Cleanup(func() {
				if err := dyn.Resource(row.want).Delete(ctx, want.GetName(), metav1.DeleteOptions{}); err != nil {
					t.Errorf("clean up: %v", err)
				}
			})
			doc := startPeeringController(t, c, controller.PeeringOptions{
				Name:   "peering-calico-published-" + row.short,
				Config: peering.Config{PruneGracePeriod: 2 * time.Second},
				State:  controllerState("rebound-peering-calico-published-" + row.short),
				Calico: &opts,
			})
			poll(ctx, t, 30*time.Second, "the controller's BGPPeer in "+row.want.GroupVersion().String(), func() (bool, string) {
				got, err := dyn.Resource(row.want).Get(ctx, want.GetName(), metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return calico.SpecEqual(got, want), fmt.Sprintf("spec %v, want %v", got.Object["spec"], want.Object["spec"])
			})
			if _, err := dyn.Resource(row.notIn).Get(ctx, want.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("BGPPeer %s in %s: err = %v, want NotFound (only %s is written)", want.GetName(), row.notIn.GroupVersion(), err, row.want.GroupVersion())
			}
			group, reason := publishedCalicoGroup(ctx, t, c, doc)
			if group != row.want.GroupVersion().String() || !strings.Contains(reason, row.reason) {
				t.Errorf("peer-set document says group %q, reason %q; want %s, %q", group, reason, row.want.GroupVersion(), row.reason)
			}
		})
	}
}

// meshOff creates the BGPConfiguration "default" with spec in one API
// group, shows the old one-field patch refused by every rule of refusedBy
// (or accepted when there is none), then applies calico.MeshOffPatch and
// checks that it switched the mesh off, cleared the mesh-only fields and
// kept the others. The object is deleted at the end, so rows can share
// the cluster.
func meshOff(ctx context.Context, t *testing.T, dyn dynamic.Interface, api calicoAPI, spec map[string]any, refusedBy []string) {
	t.Helper()
	res := dyn.Resource(api.configs)
	cfg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.configs.GroupVersion().String(), "kind": "BGPConfiguration",
		"metadata": map[string]any{"name": calico.DefaultBGPConfigurationName},
		"spec":     spec,
	}}
	if _, err := res.Create(ctx, cfg, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Fatalf("%s: create BGPConfiguration %v: %v", api.name, spec, err)
	}
	defer func() {
		if err := res.Delete(ctx, calico.DefaultBGPConfigurationName, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("%s: delete BGPConfiguration: %v", api.name, err)
		}
	}()

	// Dry run: the old patch's outcome is shown without changing the object.
	_, err := res.Patch(ctx, calico.DefaultBGPConfigurationName, types.MergePatchType, []byte(oldMeshOffPatch),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case len(refusedBy) == 0 && err != nil:
		t.Errorf("%s, spec %v: the one-field patch is refused: %v", api.name, spec, err)
	case len(refusedBy) > 0 && !apierrors.IsInvalid(err):
		t.Errorf("%s, spec %v: the one-field patch: err = %v, want Invalid from Calico's rule", api.name, spec, err)
	}
	for _, rule := range refusedBy {
		if err == nil || !strings.Contains(err.Error(), rule) {
			t.Errorf("%s, spec %v: the one-field patch's error %v does not say %q", api.name, spec, err, rule)
		}
	}

	got, err := res.Patch(ctx, calico.DefaultBGPConfigurationName, types.MergePatchType, []byte(calico.MeshOffPatch), metav1.PatchOptions{})
	if err != nil {
		t.Errorf("%s, spec %v: the documented patch %s is refused: %v", api.name, spec, calico.MeshOffPatch, err)
		return
	}
	if calico.MeshEnabled(got) {
		t.Errorf("%s, spec %v: mesh still on after the documented patch", api.name, spec)
	}
	gotSpec, _, _ := unstructured.NestedMap(got.Object, "spec")
	for k, v := range spec {
		_, has := gotSpec[k]
		switch k {
		case "nodeMeshMaxRestartTime", "nodeMeshPassword":
			if has {
				t.Errorf("%s: spec.%s still set after the documented patch: %v", api.name, k, gotSpec[k])
			}
		case "nodeToNodeMeshEnabled":
		default:
			if fmt.Sprint(gotSpec[k]) != fmt.Sprint(v) {
				t.Errorf("%s: spec.%s = %v after the documented patch, want it kept (%v)", api.name, k, gotSpec[k], v)
			}
		}
	}
}
