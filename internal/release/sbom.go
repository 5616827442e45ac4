package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SBOM returns a CycloneDX bill of materials of the built binary at path:
// its main module and every module it links, as debug/buildinfo reads
// them from the binary (what was linked, not what go.mod lists), plus the
// Go standard library of the toolchain that built it. Every field derives
// from the binary and State, so two builds give the same document.
func SBOM(path, name string, s State) (*cdx.BOM, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the module list of %s: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)

	bom := cdx.NewBOM()
	// A serial number stable for the binary (RFC 4122 layout, version 5
	// bits), instead of a random one.
	u := sha256.Sum256(append([]byte("rebound-sbom:"), sum[:]...))
	u[6], u[8] = (u[6]&0x0f)|0x50, (u[8]&0x3f)|0x80
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])

	main := cdx.Component{
		BOMRef:     purl(bi.Main.Path, s.Version),
		Type:       cdx.ComponentTypeApplication,
		Name:       name,
		Version:    s.Version,
		PackageURL: purl(bi.Main.Path, s.Version),
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}},
		Licenses:   &cdx.Licenses{{License: &cdx.License{ID: "Apache-2.0"}}},
	}
	props := []cdx.Property{{Name: "rebound:commit", Value: s.Commit}, {Name: "rebound:go", Value: bi.GoVersion}}
	for _, st := range bi.Settings {
		if st.Key == "GOOS" || st.Key == "GOARCH" || st.Key == "CGO_ENABLED" || st.Key == "-ldflags" || st.Key == "-trimpath" {
			props = append(props, cdx.Property{Name: "go:build:" + st.Key, Value: st.Value})
		}
	}
	main.Properties = &props
	bom.Metadata = &cdx.Metadata{Timestamp: s.Date.Format(time.RFC3339), Component: &main}

	goVersion := strings.TrimPrefix(bi.GoVersion, "go")
	comps := []cdx.Component{{
		BOMRef: purl("stdlib", "v"+goVersion), Type: cdx.ComponentTypeLibrary, Name: "stdlib",
		Version: "v" + goVersion, PackageURL: purl("stdlib", "v"+goVersion),
	}}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		c := cdx.Component{
			BOMRef: purl(m.Path, m.Version), Type: cdx.ComponentTypeLibrary, Name: m.Path,
			Version: m.Version, PackageURL: purl(m.Path, m.Version), Scope: cdx.ScopeRequired,
		}
		if h, ok := h1ToSHA256(m.Sum); ok {
			c.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: h}}
		}
		comps = append(comps, c)
	}
	sort.Slice(comps, func(i, j int) bool { return comps[i].BOMRef < comps[j].BOMRef })
	bom.Components = &comps
	refs := make([]string, len(comps))
	for i, c := range comps {
		refs[i] = c.BOMRef
	}
	bom.Dependencies = &[]cdx.Dependency{{Ref: main.BOMRef, Dependencies: &refs}}
	return bom, nil
}

// WriteSBOM writes bom as CycloneDX JSON.
func WriteSBOM(w io.Writer, bom *cdx.BOM) error {
	enc := cdx.NewBOMEncoder(w, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	return enc.Encode(bom)
}

// purl is a package URL of a Go module (purl spec, type golang).
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}

// h1ToSHA256 turns a go.sum hash ("h1:" base64 of a SHA-256 over the
// module's file list) into hex, as CycloneDX's Go tools do.
func h1ToSHA256(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != sha256.Size {
		return "", false
	}
	return hex.EncodeToString(b), true
}
