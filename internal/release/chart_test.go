package release

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
)

// devState is a release past no tag, with a dirty tree: its version has
// build metadata, which a chart version keeps and an OCI tag cannot.
var devState = State{Version: "v0.0.0-dev+g0123456789ab.dirty", Commit: strings.Repeat("01", 20), Date: testState.Date, Dirty: true}

// TestChartPackage packages charts/rebound, reloads the .tgz as Helm
// does and reads the OCI layout back: the stamped versions, Helm's media
// types, the layer's digest and size the .tgz's, the config the
// archive's metadata; and a second packaging gives the same bytes.
func TestChartPackage(t *testing.T) {
	for _, s := range []State{testState, devState} {
		t.Run(s.Version, func(t *testing.T) {
			dist := t.TempDir()
			res, err := Chart(Options{Root: "../..", Dist: dist, State: s})
			if err != nil {
				t.Fatal(err)
			}
			wantVersion := strings.TrimPrefix(s.Version, "v")
			if filepath.Base(res.Package) != "rebound-"+wantVersion+".tgz" || res.Version != wantVersion || res.AppVersion != s.Version {
				t.Errorf("result %+v, want rebound-%s.tgz, version %s, appVersion %s", res, wantVersion, wantVersion, s.Version)
			}
			if filepath.Base(res.Package) != ChartPackageName("rebound", s.Version) {
				t.Errorf("package %s, ChartPackageName says %s", res.Package, ChartPackageName("rebound", s.Version))
			}
			tgz, err := os.ReadFile(res.Package)
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != sha256Hex(tgz) {
				t.Errorf("SHA256 %s, file's %s", res.SHA256, sha256Hex(tgz))
			}
			ch, err := loader.Load(res.Package)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Name() != "rebound" || ch.Metadata.Version != wantVersion || ch.Metadata.AppVersion != s.Version {
				t.Errorf("reloaded chart %s version %s appVersion %s", ch.Name(), ch.Metadata.Version, ch.Metadata.AppVersion)
			}
			if len(ch.Templates) < 10 || len(ch.CRDObjects()) != 2 {
				t.Errorf("reloaded chart has %d templates and %d CRDs", len(ch.Templates), len(ch.CRDObjects()))
			}
			if st, err := os.Stat(res.Package); err != nil || !st.ModTime().Equal(s.Date) {
				t.Errorf("package mtime %v (%v), want %s: helm push reads created from it", st.ModTime(), err, s.Date)
			}

			checkChartLayout(t, res, tgz, ch.Metadata.Version)

			again, err := Chart(Options{Root: "../..", Dist: t.TempDir(), State: s})
			if err != nil {
				t.Fatal(err)
			}
			if again.SHA256 != res.SHA256 || again.ManifestDigest != res.ManifestDigest {
				t.Errorf("two packagings differ: %s %s vs %s %s", res.SHA256, res.ManifestDigest, again.SHA256, again.ManifestDigest)
			}
		})
	}
}

func checkChartLayout(t *testing.T, res ChartResult, tgz []byte, version string) {
	t.Helper()
	lp, err := layout.FromPath(untar(t, res.Artifact))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("index.json: %v, %+v, want one manifest", err, im)
	}
	d := im.Manifests[0]
	wantTag := strings.ReplaceAll(version, "+", "_")
	if d.Digest.String() != res.ManifestDigest || d.MediaType != ocispec.MediaTypeImageManifest || d.Annotations[ocispec.AnnotationRefName] != wantTag {
		t.Errorf("index.json entry %+v, want %s tagged %s", d, res.ManifestDigest, wantTag)
	}
	raw, err := lp.Blob(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var m ocispec.Manifest
	if err := json.NewDecoder(raw).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != registry.ConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != registry.ChartLayerMediaType {
		t.Fatalf("manifest %+v: want config %s and one layer %s", m, registry.ConfigMediaType, registry.ChartLayerMediaType)
	}
	if l := m.Layers[0]; l.Digest.String() != "sha256:"+sha256Hex(tgz) || l.Size != int64(len(tgz)) {
		t.Errorf("layer %s (%d bytes), the .tgz is sha256:%s (%d bytes)", l.Digest, l.Size, sha256Hex(tgz), len(tgz))
	}
	cfg, err := lp.Bytes(v1Hash(t, m.Config.Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Name, Version, AppVersion string }
	if err := json.Unmarshal(cfg, &meta); err != nil || meta.Name != "rebound" || meta.Version != version || meta.AppVersion != res.AppVersion {
		t.Errorf("config %s (%v)", cfg, err)
	}
	if m.Annotations[ocispec.AnnotationVersion] != version || m.Annotations[ocispec.AnnotationTitle] != "rebound" ||
		m.Annotations[ocispec.AnnotationCreated] != testState.Date.Format(time.RFC3339) {
		t.Errorf("annotations %v", m.Annotations)
	}
}

// TestChartArtifactIsHelmPush pushes the packaged chart with Helm's own
// registry client to a registry on loopback (go-containerregistry's, in
// memory), with the creation time `helm push` reads from the file, and
// pulls it back: the registry holds the manifest digest of the OCI
// layout, and Helm pulls the .tgz's bytes.
func TestChartArtifactIsHelmPush(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Chart(Options{Root: "../..", Dist: t.TempDir(), State: devState})
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := os.ReadFile(res.Package)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(&out))
	if err != nil {
		t.Fatal(err)
	}
	ref := u.Host + "/charts/rebound:" + res.Version
	st, err := os.Stat(res.Package)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := c.Push(tgz, ref, registry.PushOptCreationTime(st.ModTime().UTC().Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	if pushed.Manifest.Digest != res.ManifestDigest || pushed.Chart.Digest != "sha256:"+res.SHA256 {
		t.Errorf("helm push: manifest %s, chart %s; the release's layout has %s, the .tgz sha256:%s",
			pushed.Manifest.Digest, pushed.Chart.Digest, res.ManifestDigest, res.SHA256)
	}
	pulled, err := c.Pull(ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pulled.Chart.Data, tgz) || pulled.Chart.Meta.AppVersion != devState.Version {
		t.Errorf("helm pull: %d bytes, appVersion %s", len(pulled.Chart.Data), pulled.Chart.Meta.AppVersion)
	}
}

// TestChartLintFails: a chart whose template cannot render is refused
// with helm lint's message, and nothing is left in dist.
func TestChartLintFails(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"Chart.yaml":                "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
		"values.yaml":               "replicas: 1\n",
		"templates/deployment.yaml": "replicas: {{ .Values.missing.field }}\n",
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dist := t.TempDir()
	_, err := Chart(Options{Root: "../..", Chart: dir, Dist: dist, State: testState})
	if err == nil || !strings.Contains(err.Error(), "helm lint broken-1.2.3.tgz") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("err = %v, want helm lint's error about .Values.missing", err)
	}
	if des, _ := os.ReadDir(dist); len(des) != 0 {
		t.Errorf("dist holds %v after a lint error", des)
	}
}

func v1Hash(t *testing.T, s string) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
