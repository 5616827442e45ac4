package liveness

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOptionsValidate: the settings of the Lease and gossip planes are
// bounded (2 to MaxWatchers watchers, a Lease margin from MinLeaseMargin
// to MaxLeaseMargin) and every bad value is named by the flag that sets
// it; zero still means the default.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want []string // substrings of the error; none: valid
	}{
		{name: "zero: the defaults", opts: Options{}},
		{name: "the defaults spelled out", opts: Options{}.WithDefaults()},
		{name: "two watchers", opts: Options{Watchers: 2}},
		{name: "most watchers", opts: Options{Watchers: MaxWatchers}},
		{name: "a lone watcher", opts: Options{Watchers: 1}, want: []string{"--gossip-watchers 1", "decide a death alone"}},
		{name: "more watchers than the agents' lists hold", opts: Options{Watchers: MaxWatchers + 1}, want: []string{"--gossip-watchers 8", "want 2 to 7"}},
		{name: "negative watchers", opts: Options{Watchers: -3}, want: []string{"--gossip-watchers -3"}},
		{name: "lowered margin", opts: Options{LeaseMargin: 500 * time.Millisecond}},
		{name: "smallest margin", opts: Options{LeaseMargin: MinLeaseMargin}},
		{name: "largest margin", opts: Options{LeaseMargin: MaxLeaseMargin}},
		{name: "negative margin", opts: Options{LeaseMargin: -time.Second}, want: []string{"--lease-margin -1s", "want 100ms to 30s"}},
		{name: "margin below the kubelet's jitter", opts: Options{LeaseMargin: 10 * time.Millisecond}, want: []string{"--lease-margin 10ms", "look stale"}},
		{name: "margin past the Lease", opts: Options{LeaseMargin: time.Minute}, want: []string{"--lease-margin 1m0s", "outlast"}},
		{name: "every bad field at once", opts: Options{Watchers: 1, LeaseMargin: time.Minute, ReportMaxAge: -1}, want: []string{"--gossip-watchers 1", "--lease-margin 1m0s", "evidence.reportMaxAge"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error naming %q, got none", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestWatcherMismatches: an agent whose --gossip-watchers differs from the
// controller's is named with both numbers; one that agrees, one too old
// to say, and a read no longer fresh are not.
func TestWatcherMismatches(t *testing.T) {
	read := func(reporter string, k int, at time.Time) Report {
		return Report{Reporter: reporter, Gossip: &GossipReport{ObservedAt: at, Members: 5, Watchers: k}}
	}
	for _, tc := range []struct {
		name    string
		opts    Options
		reports []Report
		want    []WatcherMismatch
		says    string // in the first mismatch's error
	}{
		{name: "all agree on the default", reports: []Report{read("a", 3, ago(time.Second)), read("b", 3, ago(time.Second))}},
		{name: "an agent older than the field", reports: []Report{read("a", 0, ago(time.Second))}},
		{name: "BGP only, no gossip", reports: []Report{{Reporter: "a", ObservedAt: ago(time.Second)}}},
		{
			name:    "an agent watches fewer than the controller counts",
			reports: []Report{read("b", 2, ago(time.Second)), read("a", 3, ago(time.Second))},
			want:    []WatcherMismatch{{Reporter: "b", Agent: 2, Controller: 3}},
			says:    "the agent on b gossips with --gossip-watchers=2, the controller judges with --gossip-watchers=3: the controller waits for votes",
		},
		{
			name:    "the controller set to 5, the agents left at 3",
			opts:    Options{Watchers: 5},
			reports: []Report{read("b", 3, ago(time.Second)), read("a", 3, ago(time.Second))},
			want:    []WatcherMismatch{{Reporter: "a", Agent: 3, Controller: 5}, {Reporter: "b", Agent: 3, Controller: 5}},
			says:    "--gossip-watchers=3, the controller judges with --gossip-watchers=5",
		},
		{
			name:    "an agent watches more than the controller hears",
			reports: []Report{read("a", 7, ago(time.Second))},
			want:    []WatcherMismatch{{Reporter: "a", Agent: 7, Controller: 3}},
			says:    "more members than the controller hears",
		},
		{name: "a stale read says nothing", reports: []Report{read("a", 5, ago(DefaultReportMaxAge+time.Second))}},
		{name: "a read from the future says nothing", reports: []Report{read("a", 5, t0.Add(DefaultMaxClockSkew+time.Second))}},
		{
			name:    "one reporter listed twice is named once",
			reports: []Report{read("a", 5, ago(time.Second)), read("a", 5, ago(2*time.Second))},
			want:    []WatcherMismatch{{Reporter: "a", Agent: 5, Controller: 3}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.opts.WatcherMismatches(tc.reports, t0)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("mismatches %+v, want %+v", got, tc.want)
			}
			if tc.says != "" && !strings.Contains(got[0].Error(), tc.says) {
				t.Errorf("error %q lacks %q", got[0].Error(), tc.says)
			}
		})
	}
}

// TestWatcherMismatchWithholdsOnly: agents on another ring size than the
// controller's never make a death the controller's own size would not:
// with fewer, a node whose every reporting watcher says dead is still
// judged by a quorum of the controller's watchers; a watcher with the
// node alive still vetoes.
func TestWatcherMismatchWithholdsOnly(t *testing.T) {
	for _, tc := range []struct {
		name       string
		agentK     int
		controller int
		aliveOne   bool // one of the controller's watchers that reports has it alive
		want       Verdict
	}{
		{name: "agents 2, controller 3: both say dead", agentK: 2, controller: 3, want: Dead},
		{name: "agents 2, controller 5: two of five cannot make a quorum", agentK: 2, controller: 5, want: Alive},
		{name: "agents 5, controller 3: the controller hears its three", agentK: 5, controller: 3, want: Dead},
		{name: "agents 5, controller 3: one alive vetoes", agentK: 5, controller: 3, aliveOne: true, want: CutOffFromAPI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 9
			w := newGossipWorld(n)
			var names []string
			for _, node := range w.nodes {
				names = append(names, node.Name)
			}
			// Rebuild every read at the agents' own k.
			for _, name := range names {
				g := &GossipReport{ObservedAt: ago(time.Second), Members: n, Watchers: tc.agentK}
				for _, m := range Watched(name, names, tc.agentK) {
					state, since := GossipAlive, ago(time.Minute)
					if m == "n3" {
						// Dead since after its last renewal: a death
						// seen before it would be refuted by the Lease.
						state, since = GossipDead, ago(2*time.Second)
					}
					g.Watches = append(g.Watches, Watch{Node: m, State: state, Since: since})
				}
				w.gossip[name] = g
			}
			if tc.aliveOne {
				w.say(Watchers("n3", names, tc.controller)[0], "n3", GossipAlive)
			}
			w.stale("n3")
			var reports []Report
			for _, name := range names {
				reports = append(reports, Report{Reporter: name, Gossip: w.gossip[name]})
			}
			opts := Options{Watchers: tc.controller}
			a := Assess(Input{Nodes: w.nodes, Reports: reports, FirstSeen: map[string]time.Time{}, Leases: w.leases, Options: opts}, t0)
			if got := a.Of("n3").Verdict; got != tc.want {
				t.Errorf("n3 %s (%s), want %s", got, a.Of("n3").Reason, tc.want)
			}
			if len(opts.WatcherMismatches(reports, t0)) != n {
				t.Errorf("want every agent named as a mismatch")
			}
		})
	}
}
