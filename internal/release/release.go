package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Default platforms.
var (
	// CLIPlatforms are those of the rebound and kubectl-rebound tarballs.
	CLIPlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}}
	// ImagePlatforms are those of the image index.
	ImagePlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}
)

// Options configure Image and Release.
type Options struct {
	// Root is rebound's module folder (with go.mod and LICENSE).
	Root string
	// Chart is the Helm chart's folder (default Root/charts/rebound).
	Chart string
	// Dist is the output folder; Release empties it first.
	Dist  string
	State State
	// Source is the repository URL (image label, krew homepage);
	// DownloadURL the folder the krew manifest downloads archives from.
	Source      string
	DownloadURL string
	// Repository names the image in the layout (docker load's tag).
	Repository string
	CABundle   string
	// Log receives one line per step.
	Log func(format string, args ...any)
}

func (o *Options) defaults() {
	if o.Repository == "" {
		o.Repository = DefaultRepository
	}
	if o.CABundle == "" {
		o.CABundle = DefaultCABundle
	}
	if o.DownloadURL == "" && o.Source != "" {
		o.DownloadURL = strings.TrimSuffix(o.Source, "/") + "/releases/download/" + o.State.Version
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
}

// ImageResult describes a written image.
type ImageResult struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
	// Platforms are each image's compressed size: manifest, config and
	// layers, what a node pulls.
	Platforms []PlatformImage `json:"platforms"`
}

// PlatformImage is one image of the index.
type PlatformImage struct {
	Platform        string `json:"platform"`
	Digest          string `json:"digest"`
	CompressedBytes int64  `json:"compressedBytes"`
}

// ImageFileName is the OCI layout tarball of a version.
func ImageFileName(version string) string {
	return "rebound-manager_" + version + ".oci.tar"
}

// Image builds rebound-manager for ImagePlatforms and writes the image
// index as an OCI layout tarball into o.Dist. The built binaries stay in
// buildDir/<os>_<arch>/ (for SBOMs).
func Image(ctx context.Context, o Options, buildDir string) (ImageResult, map[Platform]string, error) {
	o.defaults()
	bins := map[Platform]string{}
	for _, p := range ImagePlatforms {
		o.Log("build %s for %s", Manager.Name, p)
		path, err := Build(ctx, o.Root, Manager, p, o.State, filepath.Join(buildDir, p.OS+"_"+p.Arch))
		if err != nil {
			return ImageResult{}, nil, err
		}
		bins[p] = path
	}
	license, err := os.ReadFile(filepath.Join(o.Root, "LICENSE"))
	if err != nil {
		return ImageResult{}, nil, err
	}
	idx, err := BuildImage(ImageOptions{State: o.State, Binaries: bins, CABundle: o.CABundle, License: license, Source: o.Source})
	if err != nil {
		return ImageResult{}, nil, err
	}
	if err := os.MkdirAll(o.Dist, 0o755); err != nil {
		return ImageResult{}, nil, err
	}
	res := ImageResult{Path: filepath.Join(o.Dist, ImageFileName(o.State.Version))}
	o.Log("write %s", res.Path)
	d, err := WriteLayout(res.Path, idx, o.Repository, o.State.Version)
	if err != nil {
		return ImageResult{}, nil, err
	}
	res.Digest = d.String()
	if res.Platforms, err = imageSizes(idx); err != nil {
		return ImageResult{}, nil, err
	}
	return res, bins, nil
}

// imageSizes sums each platform image's compressed blobs.
func imageSizes(idx v1.ImageIndex) ([]PlatformImage, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []PlatformImage
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		n := desc.Size + m.Config.Size
		for _, l := range m.Layers {
			n += l.Size
		}
		out = append(out, PlatformImage{Platform: desc.Platform.OS + "/" + desc.Platform.Architecture, Digest: desc.Digest.String(), CompressedBytes: n})
	}
	return out, nil
}

// Result lists what Release wrote.
type Result struct {
	Dist  string      `json:"dist"`
	Files []string    `json:"files"`
	Image ImageResult `json:"image"`
	Chart ChartResult `json:"chart"`
}

// Release writes the whole dist/: the Helm chart (packaged, linted, and
// as an OCI artifact), for each of CLIPlatforms a tarball of rebound and
// of kubectl-rebound (each with LICENSE), the image, a CycloneDX SBOM per
// binary, the krew manifest (validated by krew's own code) and SHA256SUMS
// over all of it.
func Release(ctx context.Context, o Options) (Result, error) {
	o.defaults()
	if o.DownloadURL == "" {
		return Result{}, fmt.Errorf("no download URL for the krew manifest: pass --source or --download-url")
	}
	if err := os.RemoveAll(o.Dist); err != nil {
		return Result{}, err
	}
	// The chart first: it takes a second, and a lint error should not
	// wait for minutes of cross-builds.
	chart, err := Chart(o)
	if err != nil {
		return Result{}, err
	}
	buildDir := filepath.Join(o.Dist, ".build")
	defer os.RemoveAll(buildDir)
	license, err := os.ReadFile(filepath.Join(o.Root, "LICENSE"))
	if err != nil {
		return Result{}, fmt.Errorf("LICENSE: %w", err)
	}
	readme, err := os.ReadFile(filepath.Join(o.Root, "README.md"))
	if err != nil {
		return Result{}, err
	}
	v := o.State.Version
	var plugins []PluginArchive
	for _, p := range CLIPlatforms {
		for _, b := range []Binary{CLI, Plugin} {
			o.Log("build %s for %s", b.Name, p)
			path, err := Build(ctx, o.Root, b, p, o.State, filepath.Join(buildDir, p.OS+"_"+p.Arch))
			if err != nil {
				return Result{}, err
			}
			bin, err := os.ReadFile(path)
			if err != nil {
				return Result{}, err
			}
			entries := []entry{{Name: b.Name, Mode: 0o755, Data: bin}, {Name: "LICENSE", Mode: 0o644, Data: license}}
			if b == CLI {
				entries = append(entries, entry{Name: "README.md", Mode: 0o644, Data: readme})
			}
			name := ArchiveName(b, v, p)
			if err := writeTarGz(filepath.Join(o.Dist, name), entries, o.State.Date); err != nil {
				return Result{}, err
			}
			if err := writeSBOM(filepath.Join(o.Dist, sbomName(b, v, p)), path, b.Name, o.State); err != nil {
				return Result{}, err
			}
			if b == Plugin {
				sum, err := fileSHA256(filepath.Join(o.Dist, name))
				if err != nil {
					return Result{}, err
				}
				plugins = append(plugins, PluginArchive{Platform: p, Name: name, SHA256: sum})
			}
		}
	}
	img, bins, err := Image(ctx, o, buildDir)
	if err != nil {
		return Result{}, err
	}
	for p, path := range bins {
		if err := writeSBOM(filepath.Join(o.Dist, sbomName(Manager, v, p)), path, Manager.Name, o.State); err != nil {
			return Result{}, err
		}
	}
	manifest, err := KrewManifest(v, o.Source, o.DownloadURL, plugins)
	if err != nil {
		return Result{}, err
	}
	krewPath := filepath.Join(o.Dist, KrewPluginName+".yaml")
	if err := os.WriteFile(krewPath, manifest, 0o644); err != nil {
		return Result{}, err
	}
	o.Log("validate %s with krew's validate-krew-manifest", krewPath)
	if err := ValidateKrewManifest(ctx, o.Root, krewPath); err != nil {
		return Result{}, err
	}
	if err := os.RemoveAll(buildDir); err != nil {
		return Result{}, err
	}
	files, err := writeSums(o.Dist)
	if err != nil {
		return Result{}, err
	}
	return Result{Dist: o.Dist, Files: files, Image: img, Chart: chart}, nil
}

// ArchiveName is a tarball's file name: NAME_VERSION_OS_ARCH.tar.gz.
func ArchiveName(b Binary, version string, p Platform) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", b.Name, version, p.OS, p.Arch)
}

func sbomName(b Binary, version string, p Platform) string {
	return fmt.Sprintf("%s_%s_%s_%s.cdx.json", b.Name, version, p.OS, p.Arch)
}

func writeSBOM(out, binary, name string, s State) error {
	bom, err := SBOM(binary, name, s)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := WriteSBOM(&b, bom); err != nil {
		return err
	}
	return os.WriteFile(out, b.Bytes(), 0o644)
}

func fileSHA256(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return sha256Hex(data), nil
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// writeSums writes dist/SHA256SUMS (sha256sum's format, so `sha256sum -c
// SHA256SUMS` checks a download) and returns the files it lists.
func writeSums(dist string) ([]string, error) {
	des, err := os.ReadDir(dist)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		if de.Type().IsRegular() && de.Name() != "SHA256SUMS" {
			names = append(names, de.Name())
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(dist, n))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return append(names, "SHA256SUMS"), os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(b.String()), 0o644)
}
