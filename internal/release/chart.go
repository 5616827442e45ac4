package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// DefaultChartDir is the chart's folder in the module.
const DefaultChartDir = "charts/rebound"

// ChartVersion is the chart version of a release version: the release
// version without its leading "v", as SemVer 2 spells it and as Helm
// repositories and Artifact Hub list charts. appVersion keeps the "v":
// it is the image tag the chart defaults to.
func ChartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// ChartTag is the OCI tag `helm push` gives a chart version: a tag may
// not hold "+", so Helm writes "_" (and reads it back as "+").
func ChartTag(chartVersion string) string { return strings.ReplaceAll(chartVersion, "+", "_") }

// ChartPackageName is the packaged chart of a release version, named as
// `helm package` names it: NAME-CHARTVERSION.tgz.
func ChartPackageName(name, version string) string {
	return name + "-" + ChartVersion(version) + ".tgz"
}

// ChartArtifactName is the chart's OCI layout tarball of a release
// version, beside the image's.
func ChartArtifactName(version string) string { return "rebound-chart_" + version + ".oci.tar" }

// ChartResult describes the packaged chart.
type ChartResult struct {
	// Package is the .tgz, SHA256 its digest (the OCI layer's).
	Package string `json:"package"`
	SHA256  string `json:"sha256"`
	// Artifact is the OCI layout tarball; ManifestDigest its manifest's
	// digest, the one a registry lists after `helm push` of Package.
	Artifact       string `json:"artifact"`
	ManifestDigest string `json:"manifestDigest"`
	Tag            string `json:"tag"`
	Version        string `json:"version"`
	AppVersion     string `json:"appVersion"`
	// LintWarnings are helm lint's messages below error severity.
	LintWarnings []string `json:"lintWarnings,omitempty"`
}

// Chart packages the chart (o.Chart, default Root/charts/rebound) into
// o.Dist with Helm's library, version and appVersion stamped from
// o.State, lints the package with Helm's linter (an error fails the
// release), and writes it as an OCI artifact too (WriteChartLayout).
func Chart(o Options) (ChartResult, error) {
	o.defaults()
	dir := o.Chart
	if dir == "" {
		dir = filepath.Join(o.Root, DefaultChartDir)
	}
	if err := os.MkdirAll(o.Dist, 0o755); err != nil {
		return ChartResult{}, err
	}
	o.Log("package chart %s", dir)
	res, err := PackageChart(dir, o.State, o.Dist)
	if err != nil {
		return ChartResult{}, err
	}
	o.Log("lint %s with helm's linter", res.Package)
	if res.LintWarnings, err = LintPackage(res.Package); err != nil {
		// dist holds no chart that failed its lint.
		return ChartResult{}, errors.Join(err, os.Remove(res.Package))
	}
	for _, w := range res.LintWarnings {
		o.Log("helm lint: %s", w)
	}
	data, err := os.ReadFile(res.Package)
	if err != nil {
		return ChartResult{}, err
	}
	res.Artifact = filepath.Join(o.Dist, ChartArtifactName(o.State.Version))
	o.Log("write %s", res.Artifact)
	art, err := WriteChartLayout(res.Artifact, data, o.State.Date)
	if err != nil {
		return ChartResult{}, err
	}
	res.ManifestDigest, res.Tag = art.ManifestDigest, art.Tag
	return res, nil
}

// PackageChart loads the chart folder dir, sets its version to
// ChartVersion(s.Version) and its appVersion to s.Version, and saves it
// with chartutil.Save (what `helm package` calls) into out. Save stamps
// every entry with the time of the call; the archive is rewritten with
// s.Date instead, and the file's mtime set to it (`helm push` takes the
// OCI created annotation from it), so that one commit packages to the
// same bytes every time.
func PackageChart(dir string, s State, out string) (ChartResult, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return ChartResult{}, fmt.Errorf("load chart %s: %w", dir, err)
	}
	ch.Metadata.Version = ChartVersion(s.Version)
	ch.Metadata.AppVersion = s.Version
	tmp, err := os.MkdirTemp(out, ".chart-")
	if err != nil {
		return ChartResult{}, err
	}
	defer os.RemoveAll(tmp)
	saved, err := chartutil.Save(ch, tmp)
	if err != nil {
		return ChartResult{}, fmt.Errorf("package chart %s version %s: %w", dir, ch.Metadata.Version, err)
	}
	data, err := restampChart(saved, s.Date)
	if err != nil {
		return ChartResult{}, fmt.Errorf("%s: %w", saved, err)
	}
	path := filepath.Join(out, filepath.Base(saved))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return ChartResult{}, err
	}
	if err := os.Chtimes(path, s.Date, s.Date); err != nil {
		return ChartResult{}, err
	}
	return ChartResult{
		Package: path, SHA256: sha256Hex(data),
		Version: ch.Metadata.Version, AppVersion: ch.Metadata.AppVersion,
	}, nil
}

// restampChart rewrites the chart archive at path with every entry's time
// set to mtime. Entries, their order and the gzip header's marks (Helm's
// comment and extra field) are Save's.
func restampChart(path string, mtime time.Time) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.Header.Extra, zw.Header.Comment = zr.Header.Extra, zr.Header.Comment
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		// A fresh header: nothing of the reader's (access times, format
		// guesses) leaks into the archive.
		if err := tw.WriteHeader(&tar.Header{Typeflag: h.Typeflag, Name: h.Name, Mode: h.Mode, Size: h.Size, ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// LintPackage runs Helm's linter (`helm lint CHART.tgz`: the archive
// expanded, then every rule with the chart's default values) on a
// packaged chart, so what is checked is what ships, version and all. It
// fails on any message of error severity and returns the warnings.
func LintPackage(tgz string) ([]string, error) {
	tmp, err := os.MkdirTemp("", "rebound-chart-lint-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	ch, err := loader.LoadFile(tgz)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", tgz, err)
	}
	if err := chartutil.ExpandFile(tmp, tgz); err != nil {
		return nil, fmt.Errorf("expand %s: %w", tgz, err)
	}
	l := lint.All(filepath.Join(tmp, ch.Name()), nil, "rebound-system", false)
	var errs, warnings []string
	for _, m := range l.Messages {
		switch {
		case m.Severity >= support.ErrorSev:
			errs = append(errs, m.Error())
		case m.Severity >= support.WarningSev:
			warnings = append(warnings, m.Error())
		}
	}
	if len(errs) > 0 {
		return warnings, fmt.Errorf("helm lint %s: %d error(s):\n  %s", filepath.Base(tgz), len(errs), strings.Join(errs, "\n  "))
	}
	return warnings, nil
}
