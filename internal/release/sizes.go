package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Size is one binary's weight: the non-standard packages it links and its
// size as released (stripped, static, linux/amd64).
type Size struct {
	Binary   string `json:"binary"`
	Packages int    `json:"packages"`
	Bytes    int64  `json:"bytes"`
}

// Sizes builds each binary into dir and counts its packages.
func Sizes(ctx context.Context, root string, s State, dir string, bins ...Binary) ([]Size, error) {
	var out []Size
	for _, b := range bins {
		n, err := countPackages(ctx, root, b.Package)
		if err != nil {
			return nil, err
		}
		path, err := Build(ctx, root, b, Platform{"linux", "amd64"}, s, dir)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		out = append(out, Size{Binary: b.Name, Packages: n, Bytes: st.Size()})
	}
	return out, nil
}

// countPackages counts the packages outside the standard library that pkg
// links on linux/amd64 without cgo, as the image builds it.
func countPackages(ctx context.Context, root, pkg string) (int, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("go list -deps %s: %w: %s", pkg, err, stderr.String())
	}
	return len(strings.Fields(string(out))), nil
}
