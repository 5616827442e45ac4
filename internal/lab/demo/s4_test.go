package demo

import (
	"strings"
	"testing"
	"time"

	"rebound/internal/lab/scenario"
)

// TestS4LogLinesInTableNotChart: the controller's and agents' log lines
// of S4's lane with rebound are rows of the lane's table, not marks of its
// chart's scenario steps, which stay the scenario's own.
func TestS4LogLinesInTableNotChart(t *testing.T) {
	l := Lane{Scenario: "S4", Name: laneWith, Rebound: true, Events: []scenario.Event{
		{At: time.Second, Kind: "step", Detail: "kill BIRD on node-4, node-5 (SIGKILL)"},
		{At: 2 * time.Second, Kind: "log", Subject: "controller", Detail: "peer set change node=node-5 change=leave"},
		{At: 3 * time.Second, Kind: "log", Subject: "agent node-4", Detail: "BIRD reconfigured generation=4"},
	}}
	c := buildChart(l, 10*time.Second)
	var steps []string
	for _, row := range c.Rows {
		if row.Label != "scenario steps" {
			continue
		}
		for _, m := range row.Marks {
			steps = append(steps, m.Title)
		}
	}
	if len(steps) != 1 || !strings.Contains(steps[0], "kill BIRD") {
		t.Errorf("scenario steps on the chart = %q, want only the kill", steps)
	}
	p := buildPage(Report{Scenarios: []ScenarioInfo{s4Info}, Lanes: []Lane{l}})
	var rows []string
	for _, e := range p.Scenarios[0].Lanes[0].Events {
		rows = append(rows, e.Kind+" "+e.Subject)
	}
	if strings.Join(rows, ",") != "step ,log controller,log agent node-4" {
		t.Errorf("table rows = %q, want the step and both log lines", rows)
	}
}
