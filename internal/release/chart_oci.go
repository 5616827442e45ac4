package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
)

// ChartArtifact is a packaged chart as Helm stores it in an OCI
// registry: a manifest whose config is the Chart.yaml metadata as JSON
// (registry.ConfigMediaType) and whose one layer is the .tgz
// (registry.ChartLayerMediaType).
type ChartArtifact struct {
	Manifest, Config []byte
	// ManifestDigest is sha256:... of Manifest.
	ManifestDigest string
	// Tag is the chart version as an OCI tag (ChartTag).
	Tag string
}

// NewChartArtifact builds the artifact of the packaged chart tgz byte for
// byte as `helm push` does (pkg/registry's Client.Push): the config is
// json.Marshal of the metadata Helm reads from the archive, the manifest
// an OCI image manifest without a mediaType field, annotated from the
// metadata, with created set to the archive's time (`helm push` takes it
// from the file's mtime, which PackageChart sets to created). So `helm
// push` of the .tgz, run in UTC, gives a registry this manifest's digest.
func NewChartArtifact(tgz []byte, created time.Time) (ChartArtifact, error) {
	ch, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		return ChartArtifact{}, fmt.Errorf("load packaged chart: %w", err)
	}
	config, err := json.Marshal(ch.Metadata)
	if err != nil {
		return ChartArtifact{}, err
	}
	m := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		Config:      ocispec.Descriptor{MediaType: registry.ConfigMediaType, Digest: digest.FromBytes(config), Size: int64(len(config))},
		Layers:      []ocispec.Descriptor{{MediaType: registry.ChartLayerMediaType, Digest: digest.FromBytes(tgz), Size: int64(len(tgz))}},
		Annotations: chartAnnotations(ch.Metadata, created),
	}
	manifest, err := json.Marshal(m)
	if err != nil {
		return ChartArtifact{}, err
	}
	return ChartArtifact{
		Manifest: manifest, Config: config,
		ManifestDigest: digest.FromBytes(manifest).String(),
		Tag:            ChartTag(ch.Metadata.Version),
	}, nil
}

// chartAnnotations are the manifest annotations `helm push` writes: the
// OCI ones it derives from the metadata (empty values left out), then the
// chart's own annotations, which may not override title or version.
func chartAnnotations(meta *chart.Metadata, created time.Time) map[string]string {
	a := map[string]string{}
	add := func(k, v string) {
		if strings.TrimSpace(v) != "" {
			a[k] = v
		}
	}
	add(ocispec.AnnotationDescription, meta.Description)
	add(ocispec.AnnotationTitle, meta.Name)
	add(ocispec.AnnotationVersion, meta.Version)
	add(ocispec.AnnotationURL, meta.Home)
	add(ocispec.AnnotationCreated, created.UTC().Format(time.RFC3339))
	if len(meta.Sources) > 0 {
		add(ocispec.AnnotationSource, meta.Sources[0])
	}
	var authors []string
	for _, m := range meta.Maintainers {
		s := m.Name
		if m.Email != "" {
			s += " (" + m.Email + ")"
		}
		authors = append(authors, s)
	}
	add(ocispec.AnnotationAuthors, strings.Join(authors, ", "))
	for k, v := range meta.Annotations {
		if k != ocispec.AnnotationTitle && k != ocispec.AnnotationVersion {
			a[k] = v
		}
	}
	return a
}

// WriteChartLayout writes the artifact of the packaged chart tgz as an
// OCI image layout in a tar file at path, as WriteLayout writes the
// image: index.json names the manifest, annotated
// org.opencontainers.image.ref.name with the tag, so `oras cp
// --from-oci-layout` or `crane push` put it in a registry where `helm
// pull oci://` and `helm install oci://` read it.
func WriteChartLayout(path string, tgz []byte, created time.Time) (ChartArtifact, error) {
	art, err := NewChartArtifact(tgz, created)
	if err != nil {
		return ChartArtifact{}, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".chart-layout-")
	if err != nil {
		return ChartArtifact{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return ChartArtifact{}, err
	}
	for _, blob := range [][]byte{tgz, art.Config, art.Manifest} {
		h, _, err := v1.SHA256(bytes.NewReader(blob))
		if err != nil {
			return ChartArtifact{}, err
		}
		if err := lp.WriteBlob(h, io.NopCloser(bytes.NewReader(blob))); err != nil {
			return ChartArtifact{}, err
		}
	}
	h, err := v1.NewHash(art.ManifestDigest)
	if err != nil {
		return ChartArtifact{}, err
	}
	if err := lp.AppendDescriptor(v1.Descriptor{
		MediaType:   types.OCIManifestSchema1,
		Digest:      h,
		Size:        int64(len(art.Manifest)),
		Annotations: map[string]string{ocispec.AnnotationRefName: art.Tag},
	}); err != nil {
		return ChartArtifact{}, err
	}
	return art, tarLayout(dir, path)
}
