// Package version reports the build of rebound.
//
// Release builds stamp every field from the git state at link time
// (internal/release computes the -ldflags; `make build`, `make image` and
// `make release` all use it). A plain `go build` or `go run` falls back to
// what the Go toolchain recorded about the VCS checkout.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
)

// Set at link time with -ldflags "-X rebound/internal/version.Version=..."
// (see internal/release.LDFlags). Dirty is "true" or "false".
var (
	Version = ""
	Commit  = ""
	Date    = ""
	Dirty   = ""
)

// Info is what `version` prints.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	// Date is the commit's time (RFC 3339, UTC), not the build's: two
	// builds of one commit are the same binary.
	Date      string `json:"date,omitempty"`
	Dirty     bool   `json:"dirty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build information of the running binary.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info.Dirty, _ = strconv.ParseBool(Dirty)
	if bi, ok := debug.ReadBuildInfo(); ok && Commit == "" {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.time":
				info.Date = s.Value
			case "vcs.modified":
				info.Dirty = s.Value == "true"
			}
		}
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	return info
}

func (i Info) String() string {
	s := "rebound " + i.Version
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if i.Dirty {
			c += "-dirty"
		}
		s += " (commit " + c
		if i.Date != "" {
			s += ", " + i.Date
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s %s", s, i.GoVersion, i.Platform)
}
