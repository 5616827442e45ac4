package release

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestImageManager builds rebound-manager for both platforms and the image
// index twice, then reads the written OCI layout back as a registry client
// would: same digest both times; per platform an OCI image whose config
// runs the binary as 65532 with the labels; layers holding the binary, the
// CA bundle and the users, and no shell; the amd64 binary, extracted,
// prints the stamped version.
func TestImageManager(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rebound-manager for two platforms")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadState(root)
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	ctx := context.Background()
	dist := t.TempDir()
	o := Options{Root: root, Dist: dist, State: s, Source: "https://example.org/rebound"}
	first, _, err := Image(ctx, o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	firstTar, err := os.ReadFile(first.Path)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := Image(ctx, o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	secondTar, _ := os.ReadFile(second.Path)
	if first.Digest != second.Digest || string(firstTar) != string(secondTar) {
		t.Errorf("two builds differ: %s vs %s (tarballs equal: %v)", first.Digest, second.Digest, string(firstTar) == string(secondTar))
	}
	t.Logf("image index %s", first.Digest)
	for _, p := range first.Platforms {
		t.Logf("METRIC image_compressed_size_%s=%.1f MB", strings.ReplaceAll(p.Platform, "/", "_"), float64(p.CompressedBytes)/1e6)
		if p.CompressedBytes > 40e6 {
			t.Errorf("%s image is %d bytes compressed, goal < 40 MB", p.Platform, p.CompressedBytes)
		}
	}

	dir := untar(t, first.Path)
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil || len(tm.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d entries, want 1", err, len(tm.Manifests))
	}
	if d := tm.Manifests[0]; d.Digest.String() != first.Digest || d.MediaType != types.OCIImageIndex ||
		d.Annotations["io.containerd.image.name"] != DefaultRepository+":"+s.Version || d.Annotations["org.opencontainers.image.ref.name"] != s.Version {
		t.Errorf("index.json entry = %+v", d)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range im.Manifests {
		plats = append(plats, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, img, s, d.Platform.Architecture)
	}
	if strings.Join(plats, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %v", plats)
	}
}

func checkImage(t *testing.T, img v1.Image, s State, arch string) {
	t.Helper()
	mt, _ := img.MediaType()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if mt != types.OCIManifestSchema1 || cf.Architecture != arch || cf.OS != "linux" {
		t.Errorf("%s: media type %s, platform %s/%s", arch, mt, cf.OS, cf.Architecture)
	}
	if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != ImageBinary || !cf.Created.Time.Equal(s.Date) {
		t.Errorf("%s: user %q entrypoint %q created %s", arch, c.User, c.Entrypoint, cf.Created)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source": "https://example.org/rebound", "org.opencontainers.image.revision": s.Commit,
		"org.opencontainers.image.version": s.Version, "org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if c.Labels[k] != want {
			t.Errorf("%s: label %s = %q, want %q", arch, k, c.Labels[k], want)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("%s: %d layers (%v), want 2", arch, len(layers), err)
	}
	files := map[string]*tar.Header{}
	var binary []byte
	for _, l := range layers {
		if lmt, _ := l.MediaType(); lmt != types.OCILayer {
			t.Errorf("%s: layer media type %s", arch, lmt)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimSuffix(h.Name, "/")] = h
			if "/"+h.Name == ImageBinary {
				if binary, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		rc.Close()
	}
	for _, shell := range []string{"/bin/sh", "/bin/bash", "/bin/busybox", "/usr/bin/sh", "/bin"} {
		if files[shell] != nil {
			t.Errorf("%s: the image has %s", arch, shell)
		}
	}
	for _, want := range []string{ImageBinary, ImageCABundle, "/etc/passwd", "/etc/group", "/tmp", "/usr/share/doc/rebound/LICENSE"} {
		if files[want] == nil {
			t.Errorf("%s: the image lacks %s", arch, want)
		}
	}
	if h := files[ImageBinary]; h != nil && h.Mode&0o111 == 0 {
		t.Errorf("%s: %s is not executable", arch, ImageBinary)
	}
	if arch != runtime.GOARCH || runtime.GOOS != "linux" {
		return
	}
	bin := filepath.Join(t.TempDir(), "rebound-manager")
	if err := os.WriteFile(bin, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("extracted binary: %v", err)
	}
	var info struct{ Version, Commit, Date string }
	if err := json.Unmarshal(out, &info); err != nil || info.Version != s.Version || info.Commit != s.Commit || info.Date != s.Date.Format("2006-01-02T15:04:05Z07:00") {
		t.Errorf("extracted binary's version = %s (%v), want %s %s", out, err, s.Version, s.Commit)
	}
}

// untar unpacks the layout tarball, as a user does before `crane push DIR`.
func untar(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
