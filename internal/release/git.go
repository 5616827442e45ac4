// Package release builds rebound's release artifacts without a container
// engine: stamped static binaries, reproducible OCI images (with
// go-containerregistry), tarballs, SHA256SUMS, CycloneDX SBOMs, the Helm
// chart (packaged and linted with Helm's library, and as an OCI artifact)
// and the krew plugin manifest. cmd/rebound-release is its command line; the Makefile's
// build, image, release and sizes targets call it, so the version stamp
// has one source: State, read from git.
package release

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// State is what a build is stamped with, read from the git checkout.
type State struct {
	// Version is `git describe --tags --match 'v*'` (e.g. v0.2.0, or
	// v0.2.0-3-gabcdef0 past the tag); without a tag v0.0.0-dev+gSHORT.
	// A dirty tree appends ".dirty" to the build metadata.
	Version string
	Commit  string
	// Date is the commit's time, or SOURCE_DATE_EPOCH when set: every
	// timestamp in binaries, images and archives is this one, so two
	// builds of one commit are byte for byte the same.
	Date  time.Time
	Dirty bool
}

// ReadState reads the state of the git checkout at dir.
func ReadState(dir string) (State, error) {
	var s State
	var err error
	if s.Commit, err = git(dir, "rev-parse", "HEAD"); err != nil {
		return s, fmt.Errorf("not a git checkout (the version is stamped from git): %w", err)
	}
	ct, err := git(dir, "show", "-s", "--format=%ct", "HEAD")
	if err != nil {
		return s, err
	}
	epoch, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return s, fmt.Errorf("commit time %q: %w", ct, err)
	}
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if epoch, err = strconv.ParseInt(v, 10, 64); err != nil {
			return s, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", v)
		}
	}
	s.Date = time.Unix(epoch, 0).UTC()
	// Untracked files count too: they can be compiled in.
	status, err := git(dir, "status", "--porcelain")
	if err != nil {
		return s, err
	}
	s.Dirty = status != ""
	if d, err := git(dir, "describe", "--tags", "--match", "v*"); err == nil {
		s.Version = d
		if s.Dirty {
			s.Version += "+dirty"
		}
	} else {
		s.Version = "v0.0.0-dev+g" + s.Commit[:12]
		if s.Dirty {
			s.Version += ".dirty"
		}
	}
	return s, nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// versionPkg is the package the stamp goes into.
const versionPkg = "rebound/internal/version"

// LDFlags are the linker flags of every release binary: no symbol table or
// DWARF (-s -w; debug/buildinfo still reads the module list), and the
// stamp.
func (s State) LDFlags() string {
	return strings.Join([]string{
		"-s", "-w",
		"-X", versionPkg + ".Version=" + s.Version,
		"-X", versionPkg + ".Commit=" + s.Commit,
		"-X", versionPkg + ".Date=" + s.Date.Format(time.RFC3339),
		"-X", versionPkg + ".Dirty=" + strconv.FormatBool(s.Dirty),
	}, " ")
}
