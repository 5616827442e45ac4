package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Platform is an os/arch pair, e.g. linux/arm64.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatform parses "os/arch".
func ParsePlatform(s string) (Platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
		return Platform{}, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", s)
	}
	return Platform{os, arch}, nil
}

// Binaries are the commands a release ships.
var (
	// Manager runs in the cluster; it is the image's binary.
	Manager = Binary{Name: "rebound-manager", Package: "./cmd/rebound-manager"}
	// CLI is the operator CLI.
	CLI = Binary{Name: "rebound", Package: "./cmd/rebound"}
	// Plugin is the kubectl plugin.
	Plugin = Binary{Name: "kubectl-rebound", Package: "./cmd/kubectl-rebound"}
)

// Binary is one command of the module.
type Binary struct {
	Name    string
	Package string
}

// Build compiles b for p into dir/NAME: static (CGO_ENABLED=0), paths
// trimmed, stamped with s. root is the module's folder.
func Build(ctx context.Context, root string, b Binary, p Platform, s State, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out, err := filepath.Abs(filepath.Join(dir, b.Name))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", s.LDFlags(), "-o", out, b.Package)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s for %s: %w\n%s", b.Package, p, err, stderr.String())
	}
	return out, nil
}
