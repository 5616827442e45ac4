// Package version reports the build of rebound.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at link time (-ldflags "-X rebound/internal/version.Version=v0.1.0");
// a plain `go build` or `go run` reports the VCS revision when Go recorded one.
var Version = ""

// Info is what `rebound version` prints.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build information of the running binary.
func Get() Info {
	info := Info{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Revision = s.Value
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
	if i.Revision != "" {
		s += " (" + i.Revision + ")"
	}
	return fmt.Sprintf("%s %s %s", s, i.GoVersion, i.Platform)
}
