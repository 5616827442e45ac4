package confdlab

import (
	"context"
	"crypto/sha3"
	"encoding/base32"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rebound/internal/lab/install"
	"rebound/pkg/peering"
	"rebound/pkg/peering/calico"
)

// AnnotationASNumber is the Node annotation of a node's AS in Calico's
// Kubernetes datastore (libcalico-go's nodeBgpAsnAnnotation); without it
// confd takes the BGPConfiguration's, else 64512.
const AnnotationASNumber = "projectcalico.org/ASNumber"

// API is one of the groups Calico's CRDs are served in: crd.projectcalico.org/v1
// or projectcalico.org/v3.
type API struct{ Group, Version string }

// V1 and V3 are Calico's two API groups (pkg/peering/calico).
var (
	V1 = API{calico.Group, calico.Version}
	V3 = API{calico.V3Group, calico.V3Version}
)

// GVR is the resource of the group.
func (a API) GVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: a.Group, Version: a.Version, Resource: resource}
}

func (a API) object(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": a.Group + "/" + a.Version, "kind": kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
	return u
}

// InstallCRDs creates the CRDs of one API group from a folder laid out as
// Calico publishes them (<group>_<plural>.yaml, and pools/ beside them):
// the BGP ones confd needs (bgppeers, bgpconfigurations) and the pool ones
// it reads routes from (ippools, blockaffinities, ipamblocks, bgpfilters).
// Each is waited for until served.
func InstallCRDs(ctx context.Context, cfg *rest.Config, dir string, api API) error {
	var files []string
	for _, d := range []string{dir, filepath.Join(dir, "pools")} {
		f, err := filepath.Glob(filepath.Join(d, api.Group+"_*.yaml"))
		if err != nil {
			return err
		}
		files = append(files, f...)
	}
	if len(files) < 6 {
		return fmt.Errorf("confdlab: %d %s CRDs in %s and %s/pools, want bgppeers, bgpconfigurations, ippools, blockaffinities, ipamblocks and bgpfilters (Calico's published CRDs)", len(files), api.Group, dir, dir)
	}
	cl, err := install.NewClient(cfg)
	if err != nil {
		return err
	}
	var manifests [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		manifests = append(manifests, data)
	}
	_, err = install.Apply(ctx, cl, install.ApplyOptions{FieldManager: "rebound-confdlab"}, manifests...)
	return err
}

// ClusterOptions are the cluster-wide Calico objects of a lab.
type ClusterOptions struct {
	API API
	// Mesh turns Calico's node-to-node mesh on (Calico's default); off is
	// the migration's end state with rebound (docs/peering-calico.md).
	Mesh bool
	// MeshRestartTime is the mesh's graceful restart time
	// (nodeMeshMaxRestartTime; with Mesh only), 0 for Calico's 120 s.
	MeshRestartTime time.Duration
	// Pool is the IPPool's CIDR; its blocks are /26, as Calico's default.
	Pool netip.Prefix
}

// CreateCluster creates the BGPConfiguration "default" (the mesh as asked,
// BIRD bound to each node's address: several BIRDs share one namespace)
// and an IPPool with VXLAN encapsulation. Never IPIP: confd then renders
// `krt_tunnel`, which only Calico's fork of BIRD parses.
func CreateCluster(ctx context.Context, dyn dynamic.Interface, o ClusterOptions) error {
	spec := map[string]any{"nodeToNodeMeshEnabled": o.Mesh, "bindMode": "NodeIP", "logSeverityScreen": "Info"}
	if o.Mesh && o.MeshRestartTime > 0 {
		spec["nodeMeshMaxRestartTime"] = o.MeshRestartTime.String()
	}
	cfg := o.API.object("BGPConfiguration", calico.DefaultBGPConfigurationName, spec)
	if _, err := dyn.Resource(o.API.GVR("bgpconfigurations")).Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("confdlab: BGPConfiguration: %w", err)
	}
	pool := o.API.object("IPPool", "rebound-lab-pool", map[string]any{
		"cidr": o.Pool.String(), "blockSize": int64(26), "vxlanMode": "Always", "ipipMode": "Never", "nodeSelector": "all()",
	})
	if _, err := dyn.Resource(o.API.GVR("ippools")).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("confdlab: IPPool: %w", err)
	}
	return nil
}

// SetMesh switches Calico's node-to-node mesh: off with calico.MeshOffPatch,
// the migration's documented patch; on with the way back's.
func SetMesh(ctx context.Context, dyn dynamic.Interface, api API, on bool) error {
	patch := calico.MeshOffPatch
	if on {
		patch = `{"spec":{"nodeToNodeMeshEnabled":true}}`
	}
	_, err := dyn.Resource(api.GVR("bgpconfigurations")).Patch(ctx, calico.DefaultBGPConfigurationName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// NodeOptions are one node's Calico objects.
type NodeOptions struct {
	API     API
	Name    string
	Address netip.Addr
	AS      uint32
	// Block is the node's /26 of the pool: confd renders it as a static
	// blackhole route BIRD announces (bird_aggr.cfg).
	Block netip.Prefix
}

// CreateNode annotates the Node with its BGP address and AS, as calico-node
// does at start, and gives it a confirmed affinity to its block, as
// Calico's IPAM does when the node's first pod gets an address.
func CreateNode(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, o NodeOptions) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		peering.AnnotationCalicoIPv4, netip.PrefixFrom(o.Address, 32).String(), AnnotationASNumber, strconv.FormatUint(uint64(o.AS), 10))
	if _, err := cs.CoreV1().Nodes().Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("confdlab: annotate Node %s: %w", o.Name, err)
	}
	name := o.Name + "-" + strings.NewReplacer(".", "-", "/", "-").Replace(o.Block.String())
	aff := o.API.object("BlockAffinity", name, map[string]any{
		"cidr": o.Block.String(), "node": o.Name, "state": "confirmed", "deleted": "false", "type": "host",
	})
	// confd lists a node's affinities by these labels, which Calico's IPAM
	// sets (libcalico-go's EnsureBlockAffinityLabels): without them it
	// renders no block, and the node announces nothing.
	aff.SetLabels(map[string]string{
		"projectcalico.org/hostname-hash": hostnameHash(o.Name),
		"projectcalico.org/affinity-type": "host",
		"projectcalico.org/ip-version":    "4",
	})
	if _, err := dyn.Resource(o.API.GVR("blockaffinities")).Create(ctx, aff, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("confdlab: BlockAffinity %s: %w", name, err)
	}
	return nil
}

// hostnameHash is Calico's label value for a host name: SHA3-256, base32
// without padding (labels hold 63 characters, host names more).
func hostnameHash(host string) string {
	h := sha3.Sum256([]byte(host))
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:])
}
