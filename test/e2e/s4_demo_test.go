package e2e

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"rebound/internal/testing/birdtest"
	"rebound/pkg/peering/bird"
)

// TestDemoS4 runs `rebound demo --scenarios S4` the way a user does (the
// built binary): its lane with rebound runs the real peering controller
// and agents through scenario.RunS4OnSandbox, as TestS4Bird16 does, and
// shows their log lines in the lane; the lane without shows none. The
// figures are the summary's METRIC lines; the one with rebound is held to
// TestS4Bird16's bound.
func TestDemoS4(t *testing.T) {
	birdtest.Require(t, bird.Bird16)
	t.Parallel()
	ctx := testContext(t, 12*time.Minute)
	cmd := exec.CommandContext(ctx, reboundBinary, "demo", "--fast", "--scenarios", "S4", "--report", "", "--dir", t.TempDir())
	cmd.Dir = repoPath(".")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("rebound demo: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Logf("rebound demo --scenarios S4:\n%s", text)
	for _, bad := range []string{"goroutine ", "log.SetLogger(...) was never called", "=-1"} {
		if strings.Contains(text, bad) {
			t.Errorf("output has %q", bad)
		}
	}
	logLine := func(lane, who string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\[S4 ` + lane + `\]\s+\+\d+\.\ds\s+log\s+` + who + `\s+\S`)
	}
	for _, who := range []string{"controller", `agent node-[345]`} {
		if n := len(logLine("with rebound", who).FindAllString(text, -1)); n == 0 {
			t.Errorf("the S4 lane with rebound shows no log line of %s", who)
		}
	}
	if logLine("without rebound", `\S+`).MatchString(text) {
		t.Errorf("the S4 lane without rebound shows log lines, but runs no rebound part")
	}
	if !regexp.MustCompile(`(?m)^\[S4 with rebound\].*log\s+controller\s+peer set change .*\bnode=node-[45]\b`).MatchString(text) {
		t.Errorf("the controller's log in the S4 lane with rebound does not show a dead node leaving the set")
	}
	with := demoMetric(t, text, "s4_recovery_with_rebound")
	without := demoMetric(t, text, "s4_recovery_without_rebound")
	metric(t, "demo_s4_recovery_with_rebound", with, "s")
	metric(t, "demo_s4_recovery_without_rebound", without, "s")
	if with > s4WithBound.Seconds() {
		t.Errorf("with rebound: %.1f s, want <= %s (TestS4Bird16's bound)", with, s4WithBound)
	}
	if without < s4WithoutAtLeast.Seconds() {
		t.Errorf("without rebound: %.1f s, want >= %s (BIRD's 240 s wait)", without, s4WithoutAtLeast)
	}
}

// demoMetric reads METRIC name=<value> s from the demo's summary.
func demoMetric(t *testing.T, text, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^METRIC ` + regexp.QuoteMeta(name) + `=([0-9.]+) s$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the summary has no METRIC %s", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
