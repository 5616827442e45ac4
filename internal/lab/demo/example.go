package demo

import (
	"time"

	"rebound/internal/lab/sandbox"
	"rebound/internal/lab/scenario"
)

// ExampleReport is a small fixed report, the shape of a real S1 run plus a
// lane with BGP sessions, for the HTML golden test and the browser test.
func ExampleReport() Report {
	s := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	ev := func(at float64, kind, subject, detail string) scenario.Event {
		return scenario.Event{At: s(at), Kind: kind, Subject: subject, Detail: detail}
	}
	common := []scenario.Event{
		ev(0.1, "node", "node-0", "Ready"), ev(0.1, "node", "node-1", "Ready"), ev(0.1, "node", "node-2", "Ready"),
		ev(0.1, "node", "node-3", "Ready"), ev(0.1, "node", "node-4", "Ready"),
		ev(0.1, "zone", "zone-a", "Normal (kube-controller-manager)"),
		ev(0.2, "step", "", "create kube-system/calico-kube-controllers, preferring node-3"),
		ev(1.4, "pod", "calico-kube-controllers-6d9c-x7k2p", "on node-3, Ready"),
		ev(1.5, "workload", "kube-system/calico-kube-controllers", "1/1 available"),
		ev(1.6, "step", "", "stop node-1, node-2, node-4 (heartbeats stop; NotReady after the 12s grace period)"),
		ev(14.2, "node", "node-1", "NotReady"), ev(14.3, "node", "node-2", "NotReady"), ev(14.9, "node", "node-4", "NotReady"),
		ev(15.1, "zone", "zone-a", "PartialDisruption (kube-controller-manager): eviction rate 0 in zones of <= 50 nodes, pods on dead nodes stay"),
		ev(15.2, "step", "", "stop node-3, where the critical pod runs"),
		ev(28.0, "node", "node-3", "NotReady"),
		ev(28.1, "pod", "calico-kube-controllers-6d9c-x7k2p", "on node-3, not Ready"),
		ev(28.2, "workload", "kube-system/calico-kube-controllers", "0/1 available"),
		ev(28.3, "step", "", "watch for 1m30s: does the pod leave node-3?"),
	}
	without := append(append([]scenario.Event(nil), common...),
		ev(118.3, "step", "", "after 1m30s: kube-system/calico-kube-controllers still 0/1 available, pod still bound to [node-3], zone PartialDisruption <never \"moved\"> & co"),
	)
	with := append(append([]scenario.Event(nil), common...),
		ev(58.4, "pod", "calico-kube-controllers-6d9c-x7k2p", "on node-3, not Ready, Terminating"),
		ev(58.5, "pod", "calico-kube-controllers-6d9c-q4m8z", "Pending (not scheduled)"),
		ev(58.7, "pod", "calico-kube-controllers-6d9c-q4m8z", "on node-0, not Ready"),
		ev(59.9, "pod", "calico-kube-controllers-6d9c-q4m8z", "on node-0, Ready"),
		ev(60.0, "workload", "kube-system/calico-kube-controllers", "1/1 available"),
		ev(60.1, "step", "", "kube-system/calico-kube-controllers available again on node-0, 32.0s after node-3 went NotReady"),
	)
	bgp := []scenario.Event{
		ev(0, "step", "", "start BIRD on node-0..node-2, all peered"),
		ev(0.5, "bgp", "node-0 ↔ node-1", "Established"), ev(0.5, "bgp", "node-0 ↔ node-2", "Established"),
		ev(2, "step", "", "kill node-1 and node-2; restart node-0's BIRD"),
		ev(2.2, "bgp", "node-0 ↔ node-1", "Connect (graceful-restart wait)"), ev(2.2, "bgp", "node-0 ↔ node-2", "Connect (graceful-restart wait)"),
		ev(44, "bgp", "node-0 ↔ node-1", "removed from the peer set"), ev(44, "bgp", "node-0 ↔ node-2", "removed from the peer set"),
		ev(44.5, "step", "", "node-0 programs its routes"),
	}
	return Report{
		Started: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Timings: sandbox.FastTimings(),
		Observe: 90,
		Scenarios: []ScenarioInfo{s1Info, {
			ID: "S4", Title: "a BIRD node restarts while its peers are dead (example)",
			Measure: "from BIRD's restart to its routes programmed",
		}},
		Lanes: []Lane{
			{Scenario: "S1", Name: laneWithout, Played: true, Measured: true, FromLabel: "node-3 NotReady", FromSeconds: 28,
				Outcome: "never: still 0/1 available 90s after node-3 NotReady, zone PartialDisruption", Events: without},
			{Scenario: "S1", Name: laneWith, Rebound: true, Played: true, Measured: true, Recovered: true, FromLabel: "node-3 NotReady", FromSeconds: 28,
				RecoveredAtSeconds: 60, RecoverySeconds: 32, Outcome: "32.0s (on node-0)", Events: with},
			{Scenario: "S4", Name: laneWithout, FromLabel: "BIRD restart", FromSeconds: 2,
				Outcome: "not played in this example", Events: bgp[:6]},
			{Scenario: "S4", Name: laneWith, Rebound: true, Played: true, Recovered: true, FromLabel: "BIRD restart", FromSeconds: 2,
				RecoveredAtSeconds: 44.5, RecoverySeconds: 42.5, Outcome: "42.5s", Events: bgp},
		},
		Comparisons: []scenario.Comparison{{ID: "s1", Observe: 90 * time.Second,
			Without: scenario.Recovery{Node: "node-3", UnavailableAtLeast: 90},
			With:    scenario.Recovery{Node: "node-3", Recovered: true, PodNode: "node-0", Seconds: 32}}},
	}
}
