package release

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things are in the image.
const (
	// ImageBinary is the entrypoint: rebound-manager.
	ImageBinary = "/usr/local/bin/rebound-manager"
	// ImageCABundle is where Go's crypto/x509 looks first on Linux.
	ImageCABundle = "/etc/ssl/certs/ca-certificates.crt"
	// NonRoot is the user and group the image runs as (distroless's
	// "nonroot"): a PodSecurity "restricted" namespace needs runAsNonRoot.
	NonRoot = 65532
	// DefaultCABundle is Debian's ca-certificates bundle on the build
	// machine (Makefile deps installs the package).
	DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"
	// DefaultRepository names the image in the layout's annotations.
	DefaultRepository = "rebound/rebound"
)

// ImageOptions describe the image index to build.
type ImageOptions struct {
	State State
	// Binaries maps each platform to its rebound-manager binary (linux).
	Binaries map[Platform]string
	// CABundle is a PEM file of trusted roots.
	CABundle string
	// License is the LICENSE text, shipped beside the binary.
	License []byte
	// Source is the repository URL of the org.opencontainers.image.source
	// label.
	Source string
}

// Labels are the OCI labels of the image config and the index's
// annotations.
func (o ImageOptions) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "rebound",
		"org.opencontainers.image.description": "rebound controller and BGP node agent (rebound-manager)",
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.revision":    o.State.Commit,
		"org.opencontainers.image.version":     o.State.Version,
		"org.opencontainers.image.created":     o.State.Date.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
}

// BuildImage builds the OCI image index, one image per platform, each of
// two layers: the base (users, CA bundle, /tmp) and the binary. There is
// no shell or any other program. Every timestamp is the commit's.
func BuildImage(o ImageOptions) (v1.ImageIndex, error) {
	if len(o.Binaries) == 0 {
		return nil, errors.New("no binaries to put in the image")
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w (install Debian's ca-certificates, or pass --ca-bundle)", err)
	}
	base, err := layer(baseEntries(ca), o.State.Date)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range sortedPlatforms(o.Binaries) {
		bin, err := os.ReadFile(o.Binaries[p])
		if err != nil {
			return nil, err
		}
		app, err := layer([]entry{
			{Name: "usr/", Mode: 0o755}, {Name: "usr/local/", Mode: 0o755}, {Name: "usr/local/bin/", Mode: 0o755},
			{Name: ImageBinary[1:], Mode: 0o755, Data: bin},
			{Name: "usr/share/", Mode: 0o755}, {Name: "usr/share/doc/", Mode: 0o755}, {Name: "usr/share/doc/rebound/", Mode: 0o755},
			{Name: "usr/share/doc/rebound/LICENSE", Mode: 0o644, Data: o.License},
		}, o.State.Date)
		if err != nil {
			return nil, err
		}
		img, err := image(o, p, base, app)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}},
		})
	}
	return mutate.Annotations(idx, o.Labels()).(v1.ImageIndex), nil
}

func image(o ImageOptions, p Platform, base, app v1.Layer) (v1.Image, error) {
	created := v1.Time{Time: o.State.Date}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "rebound-release: users, CA bundle, /tmp", Comment: "base"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "rebound-release: " + ImageBinary + " " + o.State.Version}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Arch, created
	cf.Author = "rebound"
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		Entrypoint: []string{ImageBinary},
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + ImageCABundle},
		WorkingDir: "/home/nonroot",
		Labels:     o.Labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// baseEntries are the files every platform shares.
func baseEntries(ca []byte) []entry {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	return []entry{
		{Name: "etc/", Mode: 0o755},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Name: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Name: "etc/ssl/", Mode: 0o755}, {Name: "etc/ssl/certs/", Mode: 0o755},
		{Name: ImageCABundle[1:], Mode: 0o644, Data: ca},
		{Name: "home/", Mode: 0o755},
		{Name: "home/nonroot/", Mode: 0o700, UID: NonRoot, GID: NonRoot},
		{Name: "tmp/", Mode: 0o1777},
	}
}

// layer is an OCI layer (gzip) of entries.
func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	b, err := tarBytes(entries, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
}

func sortedPlatforms(m map[Platform]string) []Platform {
	var ps []Platform
	for p := range m {
		ps = append(ps, p)
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].String() < ps[j-1].String(); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
	return ps
}

// WriteLayout writes idx as an OCI image layout in a tar file at path:
// index.json names the image index with the annotations
// org.opencontainers.image.ref.name (the version) and
// io.containerd.image.name (repository:version) that `docker load`
// tags it with. `crane push DIR REF` takes the layout unpacked, as does
// `skopeo copy oci-archive:FILE`. Returns the index's digest.
func WriteLayout(path string, idx v1.ImageIndex, repository, version string) (v1.Hash, error) {
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".layout-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": version,
		"io.containerd.image.name":          repository + ":" + version,
	})); err != nil {
		return v1.Hash{}, err
	}
	return digest, tarLayout(dir, path)
}

// tarLayout writes the OCI layout folder dir as a tar file at path. The
// layout's own times are the epoch: the archive depends only on what the
// layout holds.
func tarLayout(dir, path string) error {
	entries, err := dirEntries(dir, "")
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeTar(f, entries, time.Unix(0, 0)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
