package demo

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"rebound/internal/lab/report"
)

func TestSelectScenarios(t *testing.T) {
	all, err := selectScenarios(nil)
	if err != nil || len(all) != len(allScenarios) {
		t.Fatalf("selectScenarios(nil) = %d, %v; want all %d", len(all), err, len(allScenarios))
	}
	got, err := selectScenarios([]string{"s4", "S1"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.info.ID)
	}
	if !slices.Equal(ids, []string{"S1", "S4"}) { // the demo's order, not the flag's
		t.Errorf("ids = %v, want [S1 S4]", ids)
	}
	if _, err := selectScenarios([]string{"S3"}); err == nil || !strings.Contains(err.Error(), "S1, S2, S13, S17, S4") {
		t.Errorf("unknown scenario: err = %v, want the known ones listed", err)
	}
	if !slices.Equal(ScenarioIDs(), []string{"S1", "S2", "S13", "S17", "S4"}) {
		t.Errorf("ScenarioIDs() = %v", ScenarioIDs())
	}
}

func TestHeldWriter(t *testing.T) {
	var out bytes.Buffer
	h := &heldWriter{w: &out}
	_, _ = h.Write([]byte("a\n"))
	if out.Len() != 0 {
		t.Fatalf("written before release: %q", out.String())
	}
	h.release()
	_, _ = h.Write([]byte("b\n"))
	h.release()
	if out.String() != "a\nb\n" {
		t.Errorf("out = %q, want a then b", out.String())
	}
}

func TestPrintSummary(t *testing.T) {
	var out bytes.Buffer
	if err := printSummary(&out, ExampleReport()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SCENARIO", "S1", "never: still 0/1 available", "32.0s (on node-0)", "S4", "42.5s",
		"METRIC s1_without_rebound_recovered=0 count", "METRIC s1_recovery_with_rebound=32.0 s", "METRIC s1_speedup_at_least=2.8 x",
		"CONFIG s1_without_rebound_observe=90 s", "METRIC s4_recovery_with_rebound=42.5 s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "=-1") {
		t.Errorf("summary prints a -1 recovery time:\n%s", out.String())
	}
	n := 0
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "METRIC ") || strings.HasPrefix(l, "CONFIG ") {
			n++
			if _, err := report.Parse(l); err != nil {
				t.Errorf("summary line %q: %v", l, err)
			}
		}
	}
	if n == 0 {
		t.Error("summary prints no METRIC lines")
	}
}

func TestChartClasses(t *testing.T) {
	for detail, want := range map[string]string{
		"Established":                         "bgp-up",
		"Established (graceful-restart wait)": "bgp-wait",
		"Passive":                             "bgp-wait",
		"removed from the peer set":           "bgp-down",
		"down (BIRD not running)":             "bgp-down",
	} {
		if got := bgpClass(detail); got != want {
			t.Errorf("bgpClass(%q) = %s, want %s", detail, got, want)
		}
	}
	for detail, want := range map[string]string{"1/1 available": "avail-full", "0/1 available": "avail-degraded", "2/2 live nodes have it": "avail-full", "x": "avail-degraded"} {
		if got := availabilityClass(detail); got != want {
			t.Errorf("availabilityClass(%q) = %s, want %s", detail, got, want)
		}
	}
	if !naturalLess("node-2", "node-10") || naturalLess("node-10", "node-2") {
		t.Error("naturalLess does not order node-2 before node-10")
	}
}
