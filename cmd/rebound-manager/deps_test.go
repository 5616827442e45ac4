package main

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are what must never run in the cluster: etcd's server (the
// operator CLI's backup and restore link it) and the whole lab (sandbox,
// demo, scenarios, BIRD lab, host stand-ins). The lab's old paths are
// listed too, so a move of those packages cannot slip one back in.
var forbidden = []string{
	"go.etcd.io/etcd/server",
	"rebound/internal/lab/",
	"rebound/pkg/peering/bird/birdlab", "rebound/internal/lab/birdlab",
	"rebound/pkg/peering/bird/birdproc", "rebound/internal/lab/birdproc",
	"rebound/pkg/peering/bird/birdtest", "rebound/internal/testing/birdtest",
	"rebound/test/",
}

// TestManagerLinksNoLabCode lists the packages the image's binary links
// (go list -deps, as the linker sees them) and fails on any of the above.
func TestManagerLinksNoLabCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "rebound/cmd/rebound-manager").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 100 {
		t.Fatalf("go list -deps printed %d packages; expected the whole graph", len(pkgs))
	}
	var bad []string
	for _, p := range pkgs {
		for _, f := range forbidden {
			if p == strings.TrimSuffix(f, "/") || strings.HasPrefix(p, strings.TrimSuffix(f, "/")+"/") {
				bad = append(bad, p)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("rebound-manager links %d packages that must not run in the cluster:\n  %s\nmove the import into cmd/rebound (the operator CLI)", len(bad), strings.Join(bad, "\n  "))
	}
}

// TestManagerCommands keeps the image's binary to its in-cluster commands.
func TestManagerCommands(t *testing.T) {
	var names []string
	for _, c := range newRootCommand().Commands() {
		names = append(names, c.Name())
	}
	if got := strings.Join(names, " "); got != "agent controller version" {
		t.Errorf("commands = %q, want agent controller version", got)
	}
}
