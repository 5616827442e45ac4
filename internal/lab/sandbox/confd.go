package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ConfdSourceEnv names the folder of Calico's confd source (a module with
// ./confd and confd/etc/calico/confd) when it is not the default,
// ../shared/calico/v3.32.1-confd-src beside the checkout.
const ConfdSourceEnv = "REBOUND_CONFD_SRC"

// ConfdSourceDefault is where the confd source sits relative to the
// checkout: the module proxy does not serve Calico's module, so the source
// travels beside the repository, not in it (it is Calico's, not rebound's).
const ConfdSourceDefault = "../shared/calico/v3.32.1-confd-src"

// ConfdSource returns the confd source folder for a checkout: $ConfdSourceEnv,
// else ConfdSourceDefault relative to checkout. ok is false when the folder
// holds no confd (no ./confd/confd.go): the caller says so and skips.
func ConfdSource(checkout string) (dir string, ok bool) {
	dir = os.Getenv(ConfdSourceEnv)
	if dir == "" {
		dir = filepath.Join(checkout, ConfdSourceDefault)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	_, err := os.Stat(filepath.Join(dir, "confd", "confd.go"))
	return dir, err == nil
}

// ConfdBuildOptions say where confd's source is and where the binary goes.
type ConfdBuildOptions struct {
	// SourceDir is the confd module (ConfdSource).
	SourceDir string
	// CacheDir is the sandbox binaries' cache (BuildOptions.CacheDir);
	// empty: $(os.UserCacheDir)/rebound/sandbox.
	CacheDir string
	// Progress receives one line per step; nil discards it.
	Progress io.Writer
}

// EnsureConfd returns the path of Calico's confd built from SourceDir,
// building it first if this machine has not built that source with this
// Go yet. The binary goes into the sandbox binaries' cache, one folder per
// source version (the folder's name up to "-confd-src", its go.mod and
// go.sum, and the Go version), so a changed source builds anew.
func EnsureConfd(ctx context.Context, opts ConfdBuildOptions) (string, error) {
	src := opts.SourceDir
	if _, err := os.Stat(filepath.Join(src, "confd", "confd.go")); err != nil {
		return "", fmt.Errorf("no confd source in %s (want ./confd/confd.go; set %s to the folder of Calico's confd source): %w", src, ConfdSourceEnv, err)
	}
	cache := opts.CacheDir
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory (set HOME or XDG_CACHE_HOME): %w", err)
		}
		cache = filepath.Join(base, "rebound", "sandbox")
	}
	goVersion, err := goCmdOutput(ctx, src, "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	version := strings.TrimSuffix(filepath.Base(src), "-confd-src")
	h := sha256.New()
	fmt.Fprintf(h, "confd=%s go=%s\n", version, goVersion)
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("confd source %s: %w", src, err)
		}
		h.Write(data)
	}
	dir := filepath.Join(cache, fmt.Sprintf("confd-%s_%s", version, hex.EncodeToString(h.Sum(nil))[:12]))
	bin := filepath.Join(dir, "confd")
	if st, err := os.Stat(bin); err == nil && st.Mode()&0o111 != 0 {
		return bin, nil
	}
	out := opts.Progress
	if out == nil {
		out = io.Discard
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// As the control plane: into a temporary folder renamed into place, so
	// an interrupted build never looks done.
	tmp, err := os.MkdirTemp(cache, ".build-confd-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(out, "Building Calico's confd (%s) from %s into %s.\n", version, src, dir)
	fmt.Fprintf(out, "The first build takes about 1 to 3 minutes on 2 cores (with its modules from the proxy); later ones reuse it.\n")
	t0 := time.Now()
	args := []string{"build", "-trimpath", "-o", filepath.Join(tmp, "confd"), "./confd"}
	if err := runGo(ctx, src, args, []string{"CGO_ENABLED=0"}, out, "confd", t0); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "confd ready in %s (%s).\n", bin, time.Since(t0).Round(time.Second))
	return bin, nil
}
