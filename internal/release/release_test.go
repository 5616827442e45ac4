package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

var testState = State{Version: "v1.2.3", Commit: strings.Repeat("ab", 20), Date: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}

func TestKrewManifestValidatesWithKrew(t *testing.T) {
	if testing.Short() {
		t.Skip("builds krew's validator")
	}
	sum := strings.Repeat("0123456789abcdef", 4)
	var archives []PluginArchive
	for _, p := range CLIPlatforms {
		archives = append(archives, PluginArchive{Platform: p, Name: ArchiveName(Plugin, "v1.2.3", p), SHA256: sum})
	}
	m, err := KrewManifest("v1.2.3", "https://example.org/rebound", "https://example.org/rebound/releases/download/v1.2.3/", archives)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: rebound", "version: v1.2.3", "sha256: " + sum, "bin: kubectl-rebound",
		"uri: https://example.org/rebound/releases/download/v1.2.3/kubectl-rebound_v1.2.3_darwin_arm64.tar.gz"} {
		if !bytes.Contains(m, []byte(want)) {
			t.Errorf("manifest lacks %q:\n%s", want, m)
		}
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "rebound.yaml")
	if err := os.WriteFile(good, m, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ValidateKrewManifest(ctx, "../..", good); err != nil {
		t.Fatalf("krew rejects the generated manifest: %v", err)
	}
	// krew's checks are real: a bad sum, a version that is not semver,
	// two platforms for one os/arch each fail.
	bad := map[string][]byte{
		"bad sha256":  bytes.Replace(m, []byte(sum), []byte("xyz"), 1),
		"not semver":  bytes.Replace(m, []byte("version: v1.2.3"), []byte("version: 1.2"), 1),
		"overlapping": mustManifest(t, append(archives, archives[0])),
	}
	for name, data := range bad {
		p := filepath.Join(t.TempDir(), "rebound.yaml")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ValidateKrewManifest(ctx, "../..", p); err == nil {
			t.Errorf("%s: krew accepted it", name)
		}
	}
}

func mustManifest(t *testing.T, a []PluginArchive) []byte {
	m, err := KrewManifest("v1.2.3", "", "https://example.org/d", a)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSBOMListsLinkedModules reads this test binary: the SBOM must list
// exactly the modules debug.ReadBuildInfo says it links, with their sums.
func TestSBOMListsLinkedModules(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bom, err := SBOM(exe, "release.test", testState)
	if err != nil {
		t.Fatal(err)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok || len(bi.Deps) < 10 {
		t.Fatal("no build info in the test binary")
	}
	got := map[string]bool{}
	for _, c := range *bom.Components {
		got[c.PackageURL] = true
		if c.Name != "stdlib" && (c.Hashes == nil || len((*c.Hashes)[0].Value) != 64) {
			t.Errorf("%s has no SHA-256", c.PackageURL)
		}
	}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		if !got[purl(m.Path, m.Version)] {
			t.Errorf("SBOM lacks linked module %s@%s", m.Path, m.Version)
		}
	}
	if len(got) != len(bi.Deps)+1 {
		t.Errorf("SBOM lists %d components, the binary links %d modules + stdlib", len(got), len(bi.Deps))
	}
	if bom.Metadata.Component.Version != "v1.2.3" || bom.Metadata.Timestamp != "2026-11-30T12:00:00Z" {
		t.Errorf("metadata = %+v", bom.Metadata)
	}
	var a, b bytes.Buffer
	if err := WriteSBOM(&a, bom); err != nil {
		t.Fatal(err)
	}
	bom2, _ := SBOM(exe, "release.test", testState)
	_ = WriteSBOM(&b, bom2)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two SBOMs of one binary differ")
	}
	var doc map[string]any
	if err := json.Unmarshal(a.Bytes(), &doc); err != nil || doc["bomFormat"] != "CycloneDX" {
		t.Errorf("not CycloneDX JSON: %v %v", err, doc["bomFormat"])
	}
}

// TestArchiveLayout: files at the top, executable bit, one timestamp,
// root owner, and byte-identical on a second write.
func TestArchiveLayout(t *testing.T) {
	dir := t.TempDir()
	entries := []entry{{Name: "kubectl-rebound", Mode: 0o755, Data: []byte("bin")}, {Name: "LICENSE", Mode: 0o644, Data: []byte("Apache")}}
	a, b := filepath.Join(dir, "a.tar.gz"), filepath.Join(dir, "b.tar.gz")
	for _, p := range []string{a, b} {
		if err := writeTarGz(p, entries, testState.Date); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("two writes of one archive differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(da))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(testState.Date) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %s uid %d gid %d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		if h.Name == "kubectl-rebound" && h.Mode != 0o755 {
			t.Errorf("binary mode %o, want 755", h.Mode)
		}
	}
	if strings.Join(names, " ") != "LICENSE kubectl-rebound" {
		t.Errorf("entries %v, want LICENSE kubectl-rebound at the top", names)
	}
}

func TestLDFlagsStampEveryField(t *testing.T) {
	got := testState.LDFlags()
	for _, want := range []string{"version.Version=v1.2.3", "version.Commit=" + testState.Commit, "version.Date=2026-11-30T12:00:00Z", "version.Dirty=false", "-s -w"} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
}

func TestReadStateOfThisCheckout(t *testing.T) {
	s, err := ReadState("../..")
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	if len(s.Commit) != 40 || s.Date.IsZero() || !strings.HasPrefix(s.Version, "v") {
		t.Errorf("state = %+v", s)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "86400")
	s, err = ReadState("../..")
	if err != nil || !s.Date.Equal(time.Unix(86400, 0)) {
		t.Errorf("SOURCE_DATE_EPOCH ignored: %v %v", s.Date, err)
	}
}
