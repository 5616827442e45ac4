package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// TestSBOMListsLinkedModules builds rebound-release (it links
// go-containerregistry, CycloneDX, cobra, client-go) and checks the SBOM
// against `go version -m`, the toolchain's own reading of what the binary
// links: every module with its version and sum, nothing more.
func TestSBOMListsLinkedModules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin, err := Build(context.Background(), "../..", Binary{Name: "rebound-release", Package: "./cmd/rebound-release"}, Platform{runtime.GOOS, runtime.GOARCH}, testState, dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "dep":
			want[purl(f[1], f[2])] = true
		case len(f) >= 4 && f[0] == "=>":
			want[purl(f[1], f[2])] = true
		}
	}
	if len(want) < 20 || !want[purl("github.com/google/go-containerregistry", "v0.22.1")] {
		t.Fatalf("go version -m lists %d modules: %s", len(want), out)
	}
	bom, err := SBOM(bin, "rebound-release", testState)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range *bom.Components {
		if c.Name == "stdlib" {
			continue
		}
		got[c.PackageURL] = true
		if c.Hashes == nil || len((*c.Hashes)[0].Value) != 64 {
			t.Errorf("%s has no SHA-256", c.PackageURL)
		}
		if !want[c.PackageURL] {
			t.Errorf("SBOM lists %s, which the binary does not link", c.PackageURL)
		}
	}
	for p := range want {
		if !got[p] {
			t.Errorf("SBOM lacks linked module %s", p)
		}
	}
	if bom.Metadata.Component.Version != "v1.2.3" || bom.Metadata.Timestamp != "2026-11-30T12:00:00Z" {
		t.Errorf("metadata = %+v", bom.Metadata)
	}
	var a, b bytes.Buffer
	if err := WriteSBOM(&a, bom); err != nil {
		t.Fatal(err)
	}
	bom2, _ := SBOM(bin, "rebound-release", testState)
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

// TestReleasedBinariesTypeCheckOnEveryPlatform catches Linux-only code
// (syscall fields, say) reaching a binary released for darwin, before
// `make release` does: go vet type-checks each for each platform that is
// not Linux. Linux is what every build and `make vet` here compile; each
// more platform is a full compile of the CLI's dependencies, minutes on
// a cold cache, and three of them ran past go test's 10-minute default.
func TestReleasedBinariesTypeCheckOnEveryPlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks for another OS")
	}
	for _, p := range CLIPlatforms {
		if p.OS == "linux" {
			continue
		}
		cmd := exec.Command("go", "vet", CLI.Package, Plugin.Package)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", p, err, out)
		}
	}
}
