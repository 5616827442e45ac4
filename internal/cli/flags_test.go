package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"rebound/pkg/liveness"
	"rebound/pkg/peering"
	"rebound/pkg/zone"
)

// runPeeringFlags parses args into a fresh command with AddPeeringFlags and
// returns the config and what the command printed.
func runPeeringFlags(t *testing.T, args ...string) (peering.Config, string) {
	t.Helper()
	var c peering.Config
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }, SilenceUsage: true}
	AddPeeringFlags(cmd.Flags(), &c)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return c, out.String()
}

// TestPeeringFlagAliases: the old diagnose names set the same fields as
// the controller's names, warn on use, and are hidden from --help.
func TestPeeringFlagAliases(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		grace    time.Duration
		maxAge   time.Duration
		warnings []string
	}{
		{args: nil, grace: peering.DefaultPruneGracePeriod, maxAge: peering.DefaultReportMaxAge},
		{args: []string{"--peering-prune-grace-period", "7s", "--peering-report-max-age", "9s"}, grace: 7 * time.Second, maxAge: 9 * time.Second},
		{
			args: []string{"--prune-grace-period", "7s", "--session-report-max-age", "9s"}, grace: 7 * time.Second, maxAge: 9 * time.Second,
			warnings: []string{
				"Flag --prune-grace-period has been deprecated, use --peering-prune-grace-period instead",
				"Flag --session-report-max-age has been deprecated, use --peering-report-max-age instead",
			},
		},
	} {
		c, out := runPeeringFlags(t, tc.args...)
		if c.PruneGracePeriod != tc.grace || c.Evidence.ReportMaxAge != tc.maxAge {
			t.Errorf("%v: prune grace %s, report max age %s; want %s, %s", tc.args, c.PruneGracePeriod, c.Evidence.ReportMaxAge, tc.grace, tc.maxAge)
		}
		for _, w := range tc.warnings {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output %q lacks the warning %q", tc.args, out, w)
			}
		}
		if len(tc.warnings) == 0 && strings.Contains(out, "deprecated") {
			t.Errorf("%v: unexpected warning %q", tc.args, out)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%v: the flags' config is invalid: %v", tc.args, err)
		}
	}

	var c peering.Config
	cmd := &cobra.Command{Use: "x"}
	AddPeeringFlags(cmd.Flags(), &c)
	usage := cmd.Flags().FlagUsages()
	for _, a := range peeringAliases {
		if strings.Contains(usage, "--"+a.old+" ") {
			t.Errorf("--help shows the deprecated --%s", a.old)
		}
		if !strings.Contains(usage, "--"+a.current+" ") {
			t.Errorf("--help lacks --%s", a.current)
		}
	}
}

// TestAddZoneFlags: upstream's defaults when unset, and each flag lands in
// its field.
func TestAddZoneFlags(t *testing.T) {
	var c zone.Config
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	AddZoneFlags(cmd.Flags(), &c)
	if c != zone.DefaultConfig() {
		t.Fatalf("defaults %+v, want %+v", c, zone.DefaultConfig())
	}
	cmd.SetArgs([]string{"--unhealthy-zone-threshold", "0.6", "--large-cluster-size-threshold", "10", "--node-eviction-rate", "1", "--secondary-node-eviction-rate", "0.5", "--node-monitor-grace-period", "12s"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := zone.Config{UnhealthyZoneThreshold: 0.6, LargeClusterSizeThreshold: 10, EvictionLimiterQPS: 1, SecondaryEvictionLimiterQPS: 0.5, NodeMonitorGracePeriod: 12 * time.Second}
	if c != want {
		t.Errorf("parsed %+v, want %+v", c, want)
	}
}

// TestDetectionFlags: the watchers' count and the Lease margin are set by
// one flag each (the controller's and diagnose's, registered here; the
// agents register --gossip-watchers here too), land in the liveness
// options, and bad values are refused at start, named by the flag.
func TestDetectionFlags(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		watchers int
		margin   time.Duration
		// window and share: zero means the default, -1 zero.
		window time.Duration
		share  float64
		bad    []string // substrings of the start error; none: valid
	}{
		{args: nil, watchers: liveness.DefaultWatchers, margin: liveness.DefaultLeaseMargin},
		{args: []string{"--gossip-watchers=5", "--lease-margin=500ms"}, watchers: 5, margin: 500 * time.Millisecond},
		{args: []string{"--gossip-watchers=2", "--lease-margin=30s"}, watchers: 2, margin: 30 * time.Second},
		{args: []string{"--gossip-watchers=1"}, watchers: 1, margin: liveness.DefaultLeaseMargin, bad: []string{"--gossip-watchers 1"}},
		{args: []string{"--gossip-watchers=0"}, watchers: 0, margin: liveness.DefaultLeaseMargin, bad: []string{"--gossip-watchers 0"}},
		{args: []string{"--gossip-watchers=8"}, watchers: 8, margin: liveness.DefaultLeaseMargin, bad: []string{"--gossip-watchers 8"}},
		{args: []string{"--lease-margin=0s"}, watchers: 3, margin: 0, bad: []string{"--lease-margin 0s"}},
		{args: []string{"--lease-margin=-1s"}, watchers: 3, margin: -time.Second, bad: []string{"--lease-margin -1s"}},
		{args: []string{"--lease-margin=2m", "--gossip-watchers=9"}, watchers: 9, margin: 2 * time.Minute, bad: []string{"--lease-margin 2m0s", "--gossip-watchers 9"}},
		{args: []string{"--gossip-distrust-window=15s", "--gossip-distrust-share=0.25"}, watchers: 3, margin: liveness.DefaultLeaseMargin, window: 15 * time.Second, share: 0.25},
		{args: []string{"--gossip-distrust-window=1s"}, watchers: 3, margin: liveness.DefaultLeaseMargin, window: time.Second, bad: []string{"--gossip-distrust-window 1s"}},
		{args: []string{"--gossip-distrust-window=0s"}, watchers: 3, margin: liveness.DefaultLeaseMargin, window: -1, bad: []string{"--gossip-distrust-window 0s"}},
		{args: []string{"--gossip-distrust-share=0.6"}, watchers: 3, margin: liveness.DefaultLeaseMargin, share: 0.6, bad: []string{"--gossip-distrust-share 0.6"}},
		{args: []string{"--gossip-distrust-share=0"}, watchers: 3, margin: liveness.DefaultLeaseMargin, share: -1, bad: []string{"--gossip-distrust-share 0"}},
	} {
		switch tc.window {
		case 0:
			tc.window = liveness.DefaultGossipDistrustWindow
		case -1:
			tc.window = 0
		}
		switch tc.share {
		case 0:
			tc.share = liveness.DefaultGossipDistrustShare
		case -1:
			tc.share = 0
		}
		var o liveness.Options
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		AddDetectionFlags(cmd.Flags(), &o)
		cmd.SetArgs(tc.args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.Watchers != tc.watchers || o.LeaseMargin != tc.margin || o.GossipDistrustWindow != tc.window || o.GossipDistrustShare != tc.share {
			t.Errorf("%v: watchers %d, margin %s, window %s, share %v; want %d, %s, %s, %v", tc.args, o.Watchers, o.LeaseMargin, o.GossipDistrustWindow, o.GossipDistrustShare,
				tc.watchers, tc.margin, tc.window, tc.share)
		}
		err := ValidateDetection(o)
		if len(tc.bad) == 0 && err != nil {
			t.Errorf("%v: want valid, got %v", tc.args, err)
		}
		for _, b := range tc.bad {
			if err == nil || !strings.Contains(err.Error(), b) {
				t.Errorf("%v: error %v lacks %q", tc.args, err, b)
			}
		}
		if len(tc.bad) == 0 && o.Validate() != nil {
			t.Errorf("%v: the flags pass but the options they set do not: %v", tc.args, o.Validate())
		}
	}
}
