package release

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// KrewPluginName is the plugin's name in krew's index: `kubectl rebound`.
const KrewPluginName = "rebound"

// krewPlugin is krew's Plugin manifest (krew.googlecontainertools.github.com/v1alpha2),
// written out here because krew's own module pins a client-go that cannot
// share rebound's module graph; krew's validator checks the result
// (ValidateKrewManifest).
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec krewSpec `json:"spec"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage,omitempty"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Caveats          string         `json:"caveats,omitempty"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string     `json:"uri"`
	Sha256 string     `json:"sha256"`
	Files  []krewFile `json:"files"`
	Bin    string     `json:"bin"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// PluginArchive is one platform's kubectl-rebound tarball.
type PluginArchive struct {
	Platform Platform
	// Name is the file name; the download URL is the base URL + Name.
	Name   string
	SHA256 string
}

// KrewManifest renders the plugin manifest for the archives, downloaded
// from baseURL (the release's download folder).
func KrewManifest(version, homepage, baseURL string, archives []PluginArchive) ([]byte, error) {
	p := krewPlugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"}
	p.Metadata.Name = KrewPluginName
	p.Spec = krewSpec{
		Version:          version,
		Homepage:         homepage,
		ShortDescription: "Explain why a cluster is not recovering after node failures",
		Description: `rebound brings a Kubernetes cluster's services back after multi-node
failures and platform restores. As a kubectl plugin it offers its read-only
part: "kubectl rebound diagnose" explains, from the cluster's own state, what
keeps services from coming back: zones in PartialDisruption where
kube-controller-manager evicts nothing, critical pods stranded on NotReady
nodes and when (or whether) they will move, BGP peers holding a node in
graceful-restart wait, and workloads that are not available.
`,
		Caveats: `diagnose only reads: it needs get and list on nodes, pods, namespaces,
PVCs, ReplicaSets, Deployments, StatefulSets, DaemonSets and RecoveryPolicies
(the ClusterRole rebound-diagnose grants exactly that).
`,
	}
	if len(archives) == 0 {
		return nil, fmt.Errorf("no kubectl-rebound archives for the krew manifest")
	}
	for _, a := range archives {
		var pl krewPlatform
		pl.Selector.MatchLabels = map[string]string{"os": a.Platform.OS, "arch": a.Platform.Arch}
		pl.URI = strings.TrimSuffix(baseURL, "/") + "/" + a.Name
		pl.Sha256 = a.SHA256
		pl.Bin = Plugin.Name
		pl.Files = []krewFile{{From: Plugin.Name, To: "."}, {From: "LICENSE", To: "."}}
		p.Spec.Platforms = append(p.Spec.Platforms, pl)
	}
	return yaml.Marshal(p)
}

// KrewValidatorDir is the module (beside the main one) that pins krew's
// own validator, cmd/validate-krew-manifest, as a tool.
const KrewValidatorDir = "hack/krew"

// ValidateKrewManifest runs krew's own validation (the index's
// validate-krew-manifest: schema, name, semver, sha256, selectors that
// match supported platforms and do not overlap) on the manifest file,
// which must be named after the plugin (rebound.yaml). It skips krew's
// trial install, which needs kubectl. root is rebound's module folder.
func ValidateKrewManifest(ctx context.Context, root, manifest string) error {
	abs, err := filepath.Abs(manifest)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "validate-krew-manifest", "-manifest", abs, "-skip-install")
	cmd.Dir = filepath.Join(root, KrewValidatorDir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("krew rejects %s: %w\n%s", manifest, err, out.String())
	}
	return nil
}
