package e2e

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"rebound/internal/lab/demo"
	"rebound/internal/lab/scenario"
)

// chromiumPath is Debian's chromium; REBOUND_CHROMIUM overrides it.
var chromiumPath = func() string {
	if p := os.Getenv("REBOUND_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}()

// TestDemoReportRendersInChromium writes the demo's HTML report for a fixed
// report (no sandbox needed), opens it in headless Chromium with the
// network off the table (file://, no background networking) and checks
// that it renders: no console or script error, a screenshot of the right
// size that is not blank.
func TestDemoReportRendersInChromium(t *testing.T) {
	requireChromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "rebound-demo.html")
	if err := demo.WriteHTMLFile(page, demo.ExampleReport()); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "screenshot.png")
	stderr, elapsed := runChromium(t, page, shot)
	metric(t, "demo_report_chromium_render", elapsed.Seconds(), "s")
	for _, line := range pageErrors(stderr) {
		t.Errorf("chromium reported a page error: %s", line)
	}

	fi, err := os.Stat(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, stderr)
	}
	if fi.Size() < 10_000 {
		t.Fatalf("screenshot is %d bytes: too small for the rendered report", fi.Size())
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot is %dx%d, want 1280x900", b.Dx(), b.Dy())
	}
	colours := distinctColours(img, 64)
	t.Logf("screenshot %s: %d bytes, %d+ distinct colours", shot, fi.Size(), colours)
	if colours < 8 {
		t.Errorf("screenshot has %d distinct colours: the page did not render (blank or single colour)", colours)
	}
	if os.Getenv("REBOUND_KEEP_SCREENSHOT") != "" {
		dst := os.Getenv("REBOUND_KEEP_SCREENSHOT")
		if b, err := os.ReadFile(shot); err == nil {
			_ = os.WriteFile(dst, b, 0o644)
		}
	}
}

// TestDemoChromiumCatchesPageErrors checks the check: a page with a script
// error must be caught, so that a change in Chromium's log format cannot
// make TestDemoReportRendersInChromium pass blindly.
func TestDemoChromiumCatchesPageErrors(t *testing.T) {
	requireChromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "bad.html")
	if err := os.WriteFile(page, []byte(`<!DOCTYPE html><html><body>x<script>console.error("boom"); nope();</script></body></html>`), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr, _ := runChromium(t, page, filepath.Join(dir, "bad.png"))
	if errs := pageErrors(stderr); len(errs) == 0 {
		t.Fatalf("a page with a script error passed; chromium said:\n%s", stderr)
	}
}

func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("REBOUND_SKIP_CHROMIUM") == "1" {
			t.Skipf("%s missing and REBOUND_SKIP_CHROMIUM=1", chromiumPath)
		}
		t.Fatalf("%s missing (%v): run: apt-get install -y chromium (or set REBOUND_SKIP_CHROMIUM=1 to skip)", chromiumPath, err)
	}
}

// runChromium loads page in headless Chromium with a fresh profile and
// nothing that talks to the network on its own, writes a 1280x900
// screenshot to shot, and returns Chromium's log.
func runChromium(t *testing.T, page, shot string) (string, time.Duration) {
	t.Helper()
	profile, err := os.MkdirTemp(t.TempDir(), "chromium-profile-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--screenshot="+shot, "--window-size=1280,900",
		"--enable-logging=stderr", "--v=0",
		"file://"+page)
	cmd.Dir = filepath.Dir(shot)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out.String())
	}
	return out.String(), time.Since(t0)
}

// pageErrors returns the lines of Chromium's log about the page: console
// messages (the report has no script, so any is a defect), uncaught
// exceptions and refused or failed loads. Chromium's own D-Bus and sandbox
// complaints are not about the page.
func pageErrors(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		for _, bad := range []string{":CONSOLE", "Uncaught", "net::ERR_", "Failed to load resource", "Refused to", "Not allowed to load"} {
			if strings.Contains(line, bad) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// distinctColours counts the distinct colours of img, stopping at limit.
func distinctColours(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// TestDemoFirstCommandAsAUser runs the README's first command the way a
// user does (the built binary, S1 only and --fast to keep it short): its
// first line comes within 5 s and says what it plays, no library stack
// trace reaches the output, and the summary prints both lanes' METRIC
// lines measured from the API's timestamps, with no -1 recovery time.
func TestDemoFirstCommandAsAUser(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 8*time.Minute)
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, reboundBinary, "demo", "--fast", "--scenarios", "S1", "--report", "", "--dir", dir)
	cmd.Dir = repoPath(".")
	var out lockedBuffer
	first := make(chan time.Duration, 1)
	start := time.Now()
	cmd.Stdout, cmd.Stderr = &out, &firstLineWriter{w: &out, start: start, first: first}
	if err := cmd.Run(); err != nil {
		// The sandboxes' logs go with the temporary directory: their
		// last lines are what tells a slow machine from a defect.
		logs, _ := filepath.Glob(filepath.Join(dir, "*", "logs", "*.log"))
		for _, l := range logs {
			t.Logf("last lines of %s:\n%s", l, tail(l, 12))
		}
		t.Fatalf("rebound demo: %v\n%s", err, out.String())
	}
	text := out.String()
	select {
	case d := <-first:
		metric(t, "demo_first_output_after", d.Seconds(), "s")
		if d > 5*time.Second {
			t.Errorf("the first line came after %s, want within 5 s", d)
		}
	default:
		t.Errorf("no output on stderr:\n%s", text)
	}
	if !strings.HasPrefix(text, "rebound demo: plays S1") {
		t.Errorf("the first line does not say what the demo plays:\n%s", text)
	}
	for _, bad := range []string{"goroutine ", "log.SetLogger(...) was never called", "=-1"} {
		if strings.Contains(text, bad) {
			t.Errorf("output has %q:\n%s", bad, text)
		}
	}
	for _, want := range []string{"METRIC s1_without_rebound_recovered=0 count", "METRIC s1_recovery_with_rebound=", "METRIC s1_speedup_at_least=", "CONFIG s1_without_rebound_observe="} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

// TestDemoS13ReplacementWithinBound runs the demo's S13 as a user does
// (`rebound demo --scenarios S13`, upstream's default timings, the built
// binary as the controller and the agents) and holds the lane with
// rebound to the bound `rebound-bench detect` holds its deaths to: the
// replacement Ready within scenario.S13ReplacementBound of the death, as
// the demo's summary promises ("seconds after the death"), read from the
// demo's own METRIC line. The lane without rebound waits for upstream's
// grace and tolerations: about 8 minutes.
func TestDemoS13ReplacementWithinBound(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 15*time.Minute)
	cmd := exec.CommandContext(ctx, reboundBinary, "demo", "--scenarios", "S13", "--report", "", "--dir", t.TempDir())
	cmd.Dir = repoPath(".")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("rebound demo: %v\n%s", err, out.String())
	}
	text := out.String()
	const name = "s13_death_to_replacement_ready"
	m := regexp.MustCompile(`(?m)^METRIC ` + name + `=([0-9.]+) s$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the demo printed no METRIC %s line:\n%s", name, text)
	}
	ready, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	metric(t, "demo_"+name, ready, "s")
	if bound := scenario.S13ReplacementBound.Seconds(); ready <= 0 || ready > bound {
		t.Errorf("the demo's S13 lane with rebound had the replacement Ready %.1fs after the death, want within %.0fs (the bench's bound):\n%s", ready, bound, text)
	}
}

// lockedBuffer is a bytes.Buffer for two writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// firstLineWriter reports when its first write came.
type firstLineWriter struct {
	w     io.Writer
	start time.Time
	first chan time.Duration
	once  sync.Once
}

func (f *firstLineWriter) Write(p []byte) (int, error) {
	f.once.Do(func() { f.first <- time.Since(f.start) })
	return f.w.Write(p)
}
