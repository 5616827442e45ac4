package sandbox

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Binaries are the paths of the upstream executables the sandbox runs.
type Binaries struct {
	Dir               string
	Etcd              string
	APIServer         string
	ControllerManager string
	Scheduler         string
	Kwok              string
	// Kubernetes is the release they were built at (e.g. v1.36.3); for
	// binaries from $REBOUND_SANDBOX_BIN, the one their apiserver reports.
	Kubernetes string
}

// BinDirEnv names a directory of prebuilt binaries that replaces the build.
const BinDirEnv = "REBOUND_SANDBOX_BIN"

const sandboxModule = "rebound/sandbox"

func binariesIn(dir string) Binaries {
	return Binaries{
		Dir:               dir,
		Etcd:              filepath.Join(dir, "etcd"),
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
		Kwok:              filepath.Join(dir, "kwok"),
	}
}

func (b Binaries) all() []string {
	return []string{b.Etcd, b.APIServer, b.ControllerManager, b.Scheduler, b.Kwok}
}

func (b Binaries) missing() []string {
	var out []string
	for _, p := range b.all() {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			out = append(out, filepath.Base(p))
		}
	}
	return out
}

// BuildOptions says where the sandbox module is and where binaries go.
type BuildOptions struct {
	// SourceDir is the sandbox module. Empty: found by walking up from the
	// working directory (works from anywhere inside a rebound checkout).
	SourceDir string
	// CacheDir holds one folder of binaries per key. Empty:
	// $(os.UserCacheDir)/rebound/sandbox.
	CacheDir string
	// Progress receives one line per step; nil discards it.
	Progress io.Writer
	// Kubernetes is the minor release to build, "1.35" or "v1.36" (the
	// patch is the one its module pins). Empty: $REBOUND_KUBERNETES, else
	// the release the sandbox module itself pins (the newest supported).
	Kubernetes string
}

// KubernetesEnv picks the Kubernetes release of every sandbox this process
// starts (tests, bench, demo) when BuildOptions.Kubernetes is empty, so
// `make test-versions` runs the same tests on each supported release.
const KubernetesEnv = "REBOUND_KUBERNETES"

// releasesDir holds one module per older supported release, each pinning
// k8s.io/kubernetes and its staging modules at that release's newest patch
// the module proxy serves. etcd and kwok are the sandbox module's own for
// every release: both speak stable APIs that every supported release uses.
const releasesDir = "kubernetes"

// ColdBuildTime is how long the first build took from a fresh clone on
// 2-core machines with empty Go caches (module downloads included; 10 min
// 31 s and 12 minutes in two measurements), so that a person knows what to
// expect before it starts.
const ColdBuildTime = "10 to 12 minutes"

// EnsureBinaries returns the control-plane binaries for the pinned versions,
// building them first if this machine has not built that set yet.
func EnsureBinaries(ctx context.Context, opts BuildOptions) (Binaries, error) {
	want := opts.Kubernetes
	if want == "" {
		want = os.Getenv(KubernetesEnv)
	}
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return prebuilt(ctx, dir, want)
	}
	src, err := findSourceDir(opts.SourceDir)
	if err != nil {
		return Binaries{}, err
	}
	pins, err := readPins(ctx, src, want)
	if err != nil {
		return Binaries{}, err
	}
	cache := opts.CacheDir
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return Binaries{}, fmt.Errorf("no cache directory (set HOME or XDG_CACHE_HOME): %w", err)
		}
		cache = filepath.Join(base, "rebound", "sandbox")
	}
	dir := filepath.Join(cache, pins.key)
	out := opts.Progress
	if out == nil {
		out = io.Discard
	}
	b := binariesIn(dir)
	b.Kubernetes = pins.kubernetes
	if len(b.missing()) > 0 {
		if err := build(ctx, src, dir, pins, out); err != nil {
			return Binaries{}, err
		}
	}
	if pins.kubeDir == src {
		// sandbox/bin is the default release's; an older one is asked
		// for by name.
		linkBinDir(src, dir)
	}
	return b, nil
}

// prebuilt returns the binaries in dir ($REBOUND_SANDBOX_BIN), with the
// release their apiserver reports; when a release is asked for too, it
// must be theirs: a folder of 1.37 never quietly stands in for 1.35.
func prebuilt(ctx context.Context, dir, want string) (Binaries, error) {
	b := binariesIn(dir)
	if m := b.missing(); len(m) > 0 {
		return Binaries{}, fmt.Errorf("%s=%s lacks %s: unset it to build them, or point it at a folder from `rebound sandbox build`", BinDirEnv, dir, strings.Join(m, ", "))
	}
	out, err := exec.CommandContext(ctx, b.APIServer, "--version").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("%s=%s: %s --version: %w", BinDirEnv, dir, b.APIServer, err)
	}
	// "Kubernetes v1.37.2"
	fields := strings.Fields(string(out))
	if len(fields) != 2 || fields[0] != "Kubernetes" {
		return Binaries{}, fmt.Errorf("%s=%s: %s --version printed %q, not \"Kubernetes vX.Y.Z\"", BinDirEnv, dir, b.APIServer, strings.TrimSpace(string(out)))
	}
	b.Kubernetes = fields[1]
	if want == "" {
		return b, nil
	}
	minor, ok := parseMinor(want)
	if !ok {
		return Binaries{}, fmt.Errorf("Kubernetes %q: not a release; give one as 1.MINOR, e.g. %s", want, strings.TrimPrefix(minorOf(b.Kubernetes), "v"))
	}
	if minor != minorOf(b.Kubernetes) {
		return Binaries{}, fmt.Errorf("Kubernetes %s was asked for (--kubernetes or %s), but %s=%s holds %s: unset one of them", want, KubernetesEnv, BinDirEnv, dir, b.Kubernetes)
	}
	return b, nil
}

// pins are the versions that decide what gets built, and the cache key
// derived from them.
type pins struct {
	kubernetes string // e.g. v1.37.2
	kubeDir    string // the module that pins it: src, or src/kubernetes/v1.MINOR
	kwok       string // e.g. v0.8.0
	goVersion  string
	key        string
}

func readPins(ctx context.Context, src, want string) (pins, error) {
	var p pins
	kv, err := os.ReadFile(filepath.Join(src, "kwok.version"))
	if err != nil {
		return p, fmt.Errorf("sandbox module %s: %w", src, err)
	}
	p.kwok = strings.TrimSpace(string(kv))
	newest, err := goCmdOutput(ctx, src, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	if err != nil {
		return p, err
	}
	if p.kubeDir, err = releaseModule(src, newest, want); err != nil {
		return p, err
	}
	p.kubernetes = newest
	if p.kubeDir != src {
		if p.kubernetes, err = goCmdOutput(ctx, p.kubeDir, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes"); err != nil {
			return p, err
		}
	}
	if w := strings.TrimPrefix(want, "v"); strings.Count(w, ".") == 2 && "v"+w != p.kubernetes {
		return p, fmt.Errorf("Kubernetes %s: the sandbox pins %s for that release; ask for %s, or change the pin in %s and run go mod tidy there",
			want, p.kubernetes, strings.TrimPrefix(minorOf(p.kubernetes), "v"), filepath.Join(p.kubeDir, "go.mod"))
	}
	if p.goVersion, err = goCmdOutput(ctx, src, "env", "GOVERSION"); err != nil {
		return p, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "kubernetes=%s kwok=%s go=%s\n", p.kubernetes, p.kwok, p.goVersion)
	files := []string{"go.mod", "go.sum", "cmd/etcd/main.go"}
	if p.kubeDir != src {
		rel, _ := filepath.Rel(src, p.kubeDir)
		files = append(files, filepath.Join(rel, "go.mod"), filepath.Join(rel, "go.sum"))
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return p, fmt.Errorf("sandbox module %s: %w", src, err)
		}
		h.Write(data)
	}
	p.key = fmt.Sprintf("k8s-%s_kwok-%s_%s", p.kubernetes, p.kwok, hex.EncodeToString(h.Sum(nil))[:12])
	return p, nil
}

// releaseModule returns the module that pins the Kubernetes release want
// ("1.36", "v1.36" or "v1.36.3"): the sandbox module itself for the newest
// release, else its folder under kubernetes/.
func releaseModule(src, newest, want string) (string, error) {
	if want == "" {
		return src, nil
	}
	minor, ok := parseMinor(want)
	if !ok {
		return "", fmt.Errorf("Kubernetes %q: not a release; give one as 1.MINOR, e.g. %s", want, strings.TrimPrefix(minorOf(newest), "v"))
	}
	if minor == minorOf(newest) {
		return src, nil
	}
	dir := filepath.Join(src, releasesDir, minor)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("Kubernetes %s: not a supported release; the sandbox builds %s", want, strings.Join(releases(src, newest), ", "))
	}
	return dir, nil
}

// releases lists the Kubernetes releases the sandbox module at src can
// build, oldest first, as 1.MINOR; newest is the one the module pins.
func releases(src, newest string) []string {
	var out []string
	entries, _ := os.ReadDir(filepath.Join(src, releasesDir))
	for _, e := range entries {
		if m, ok := parseMinor(e.Name()); ok && e.IsDir() && m != minorOf(newest) {
			out = append(out, strings.TrimPrefix(m, "v"))
		}
	}
	if m, ok := parseMinor(newest); ok {
		out = append(out, strings.TrimPrefix(m, "v"))
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(minorNumber(a), minorNumber(b)) })
	return out
}

// parseMinor turns "1.36", "v1.36" or "v1.36.3" into "v1.36".
func parseMinor(v string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "1" {
		return "", false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", false
		}
	}
	return "v1." + parts[1], true
}

func minorOf(v string) string {
	m, _ := parseMinor(v)
	return m
}

func minorNumber(v string) int {
	_, minor := kubeMajorMinor(v)
	n, _ := strconv.Atoi(minor)
	return n
}

func build(ctx context.Context, src, dir string, p pins, out io.Writer) error {
	// Build into a temporary folder and rename it into place at the end, so
	// an interrupted build never leaves a half-filled folder that looks done.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	major, minor := kubeMajorMinor(p.kubernetes)
	var ldflags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ldflags = append(ldflags,
			"-X", pkg+".gitVersion="+p.kubernetes,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean",
		)
	}
	steps := []struct {
		name string
		dir  string
		args []string
		env  []string
	}{
		{"etcd", src, []string{"build", "-trimpath", "-o", tmp + "/", "./cmd/etcd"}, nil},
		{"kube-apiserver", p.kubeDir, []string{"build", "-trimpath", "-ldflags", strings.Join(ldflags, " "), "-o", tmp + "/", "k8s.io/kubernetes/cmd/kube-apiserver"}, nil},
		{"kube-controller-manager", p.kubeDir, []string{"build", "-trimpath", "-ldflags", strings.Join(ldflags, " "), "-o", tmp + "/", "k8s.io/kubernetes/cmd/kube-controller-manager"}, nil},
		{"kube-scheduler", p.kubeDir, []string{"build", "-trimpath", "-ldflags", strings.Join(ldflags, " "), "-o", tmp + "/", "k8s.io/kubernetes/cmd/kube-scheduler"}, nil},
		// kwok has its own dependency graph (older k8s.io modules), so it
		// is installed from its module rather than built in this one.
		{"kwok", src, []string{"install", "-trimpath", "sigs.k8s.io/kwok/cmd/kwok@" + p.kwok}, []string{"GOBIN=" + tmp}},
	}
	fmt.Fprintf(out, "Building the sandbox control plane (Kubernetes %s, kwok %s) into %s.\n", p.kubernetes, p.kwok, dir)
	fmt.Fprintf(out, "The first build takes about %s on 2 cores (modules included); later ones reuse it.\n", ColdBuildTime)
	start := time.Now()
	for i, s := range steps {
		t0 := time.Now()
		fmt.Fprintf(out, "[%d/%d] %s ...\n", i+1, len(steps), s.name)
		if err := runGo(ctx, s.dir, s.args, s.env, out, s.name, t0); err != nil {
			return err
		}
		fmt.Fprintf(out, "[%d/%d] %s built in %s\n", i+1, len(steps), s.name, time.Since(t0).Round(time.Second))
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "Sandbox binaries ready in %s (%s).\n", dir, time.Since(start).Round(time.Second))
	return nil
}

// runGo runs the go command, printing a heartbeat every 30 s so a person
// watching a five-minute compile knows it is alive.
func runGo(ctx context.Context, dir string, args, env []string, out io.Writer, what string, t0 time.Time) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	var stderr strings.Builder
	cmd.Stdout = out
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("build %s: run go: %w (is Go installed and on PATH?)", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("build %s: go %s: %w\n%s", what, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
			}
			return nil
		case <-tick.C:
			fmt.Fprintf(out, "      still building %s (%s)\n", what, time.Since(t0).Round(time.Second))
		}
	}
}

func goCmdOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go %s in %s: %s", strings.Join(args, " "), dir, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("go %s: %w (is Go installed and on PATH?)", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

func kubeMajorMinor(v string) (string, string) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return "", ""
	}
	return parts[0], parts[1]
}

// findSourceDir returns dir if set, else the nearest sandbox module above
// the working directory.
func findSourceDir(dir string) (string, error) {
	if dir != "" {
		if !isSandboxModule(dir) {
			return "", fmt.Errorf("%s is not the rebound sandbox module (no go.mod with module %s)", dir, sandboxModule)
		}
		return filepath.Abs(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if cand := filepath.Join(d, "sandbox"); isSandboxModule(cand) {
			return cand, nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("cannot find the sandbox module above %s: run rebound from inside a rebound checkout, or set %s to a folder of prebuilt binaries", wd, BinDirEnv)
}

func isSandboxModule(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == sandboxModule
		}
	}
	return false
}

// linkBinDir points sandbox/bin at the current set, for people who want to
// run the binaries by hand. It is a convenience: failure is ignored.
func linkBinDir(src, dir string) {
	link := filepath.Join(src, "bin")
	if cur, err := os.Readlink(link); err == nil && cur == dir {
		return
	}
	if st, err := os.Lstat(link); err == nil && st.Mode()&os.ModeSymlink == 0 {
		return // a real folder someone made; leave it alone
	}
	_ = os.Remove(link)
	_ = os.Symlink(dir, link)
}
