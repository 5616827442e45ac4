package zone

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	zoneA = ZoneKey("region1", "zone-a")
	zoneB = ZoneKey("region1", "zone-b")
	zoneC = ZoneKey("region1", "zone-c")
)

// join concatenates node lists.
func join(lists ...[]NodeInfo) []NodeInfo {
	var out []NodeInfo
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// wantZone is the part of a ZoneResult a table row checks.
type wantZone struct {
	state           State
	notReady, total int
	excluded        int
	rate            float64
	rateReason      string // substring, optional
}

func checkZones(t *testing.T, got Cluster, want map[string]wantZone) {
	t.Helper()
	if len(got.Zones) != len(want) {
		t.Errorf("got %d zones, want %d: %+v", len(got.Zones), len(want), got.Zones)
	}
	for key, w := range want {
		z, ok := got.Zone(key)
		if !ok {
			t.Errorf("zone %s missing", DisplayZone(key))
			continue
		}
		if z.State != w.state || z.NotReady != w.notReady || z.Total != w.total || z.Excluded != w.excluded || z.Rate != w.rate {
			t.Errorf("zone %s = {%v notReady=%d total=%d excluded=%d rate=%g}, want {%v notReady=%d total=%d excluded=%d rate=%g}\n  state: %s\n  rate: %s",
				DisplayZone(key), z.State, z.NotReady, z.Total, z.Excluded, z.Rate,
				w.state, w.notReady, w.total, w.excluded, w.rate, z.StateReason, z.RateReason)
		}
		if w.rateReason != "" && !strings.Contains(z.RateReason, w.rateReason) {
			t.Errorf("zone %s RateReason %q does not mention %q", DisplayZone(key), z.RateReason, w.rateReason)
		}
		if z.StateReason == "" || z.RateReason == "" {
			t.Errorf("zone %s has an empty reason: %+v", DisplayZone(key), z)
		}
	}
}

func TestEvaluate(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		name     string
		nodes    []NodeInfo
		want     map[string]wantZone
		wantMode bool
	}{
		{name: "no nodes", nodes: nil, want: map[string]wantZone{}},
		{
			name:  "healthy single zone",
			nodes: nodes("", 5, 0),
			want:  map[string]wantZone{"": {state: Normal, total: 5, rate: 0.1}},
		},
		{
			name:  "1 of 5 down (S3): Normal, normal rate",
			nodes: nodes("", 4, 1),
			want:  map[string]wantZone{"": {state: Normal, notReady: 1, total: 5, rate: 0.1}},
		},
		{
			name:  "seed S1: 4 of 5 down, small zone: tainting stopped",
			nodes: nodes("", 1, 4),
			want: map[string]wantZone{"": {state: PartialDisruption, notReady: 4, total: 5, rate: 0,
				rateReason: "<= --large-cluster-size-threshold 50"}},
		},
		{
			name:  "StarlingX restore seed: controller-0 up, 3 of 4 down",
			nodes: join([]NodeInfo{NodeFromLabels("controller-0", map[string]string{"node-role.kubernetes.io/control-plane": ""}, true)}, nodes("", 0, 3)),
			want:  map[string]wantZone{"": {state: PartialDisruption, notReady: 3, total: 4, rate: 0}},
		},
		{
			name:  "60-node zone, 40 down: large zone, secondary rate",
			nodes: nodes(zoneA, 20, 40),
			want: map[string]wantZone{zoneA: {state: PartialDisruption, notReady: 40, total: 60, rate: 0.01,
				rateReason: "--secondary-node-eviction-rate"}},
		},
		{
			name:  "60-node cluster in two 30-node zones, 20 down each: threshold is per zone, tainting stopped",
			nodes: join(nodes(zoneA, 10, 20), nodes(zoneB, 10, 20)),
			want: map[string]wantZone{
				zoneA: {state: PartialDisruption, notReady: 20, total: 30, rate: 0},
				zoneB: {state: PartialDisruption, notReady: 20, total: 30, rate: 0},
			},
		},
		{
			name:  "exactly 50 nodes is not large",
			nodes: nodes(zoneA, 10, 40),
			want:  map[string]wantZone{zoneA: {state: PartialDisruption, notReady: 40, total: 50, rate: 0}},
		},
		{
			name:  "51 nodes is large",
			nodes: nodes(zoneA, 11, 40),
			want:  map[string]wantZone{zoneA: {state: PartialDisruption, notReady: 40, total: 51, rate: 0.01}},
		},
		{
			name:  "excluded nodes do not count towards the large-zone size",
			nodes: join(nodes(zoneA, 10, 40), excluded(nodes(zoneA, 20, 0))),
			want:  map[string]wantZone{zoneA: {state: PartialDisruption, notReady: 40, total: 50, excluded: 20, rate: 0}},
		},
		{
			name:  "excluded nodes left out of counting",
			nodes: join(nodes("", 1, 4), excluded(nodes("", 5, 0))),
			want:  map[string]wantZone{"": {state: PartialDisruption, notReady: 4, total: 5, excluded: 5, rate: 0}},
		},
		{
			name:     "single zone all down: all zones fully disrupted, evictions stopped",
			nodes:    nodes("", 0, 5),
			want:     map[string]wantZone{"": {state: FullDisruption, notReady: 5, total: 5, rate: 0, rateReason: "every zone is FullDisruption"}},
			wantMode: true,
		},
		{
			name:  "every zone all down: evictions stopped everywhere",
			nodes: join(nodes(zoneA, 0, 3), nodes(zoneB, 0, 7)),
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 3, total: 3, rate: 0},
				zoneB: {state: FullDisruption, notReady: 7, total: 7, rate: 0},
			},
			wantMode: true,
		},
		{
			name:  "one zone down while another is healthy: the dead zone gets the NORMAL rate",
			nodes: join(nodes(zoneA, 0, 3), nodes(zoneB, 7, 0)),
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 3, total: 3, rate: 0.1, rateReason: "FullDisruption while another zone is not"},
				zoneB: {state: Normal, total: 7, rate: 0.1},
			},
		},
		{
			name:  "one zone down, one partially: Full at normal rate, Partial stopped",
			nodes: join(nodes(zoneA, 0, 3), nodes(zoneB, 1, 6)),
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 3, total: 3, rate: 0.1},
				zoneB: {state: PartialDisruption, notReady: 6, total: 7, rate: 0},
			},
		},
		{
			name:  "only Ready node is excluded: zone fully disrupted (upstream TestMonitorNodeHealth case)",
			nodes: join(nodes(zoneA, 0, 1), excluded(nodes(zoneA, 1, 0))),
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 1, total: 1, excluded: 1, rate: 0},
			},
			wantMode: true,
		},
		{
			name:  "zone of excluded nodes only: Initial, normal rate, does not stop the mode",
			nodes: join(nodes(zoneA, 0, 4), excluded(nodes(zoneB, 1, 2))),
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 4, total: 4, rate: 0},
				zoneB: {state: Initial, excluded: 3, rate: 0.1, rateReason: "no counted node"},
			},
			wantMode: true,
		},
		{
			name:  "three zones, nodes interleaved",
			nodes: join(nodes(zoneC, 2, 0), nodes(zoneA, 1, 1), nodes(zoneB, 0, 1), nodes(zoneC, 0, 3)),
			want: map[string]wantZone{
				zoneA: {state: Normal, notReady: 1, total: 2, rate: 0.1},
				zoneB: {state: FullDisruption, notReady: 1, total: 1, rate: 0.1},
				zoneC: {state: PartialDisruption, notReady: 3, total: 5, rate: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Evaluate(tt.nodes, cfg)
			checkZones(t, got, tt.want)
			if got.FullDisruptionMode != tt.wantMode {
				t.Errorf("FullDisruptionMode = %v, want %v", got.FullDisruptionMode, tt.wantMode)
			}
			wantChange := NoModeChange
			if tt.wantMode {
				wantChange = EnteredFullDisruptionMode
			}
			if got.ModeChange != wantChange {
				t.Errorf("ModeChange = %v, want %v", got.ModeChange, wantChange)
			}
			for i := 1; i < len(got.Zones); i++ {
				if got.Zones[i-1].Zone >= got.Zones[i].Zone {
					t.Errorf("zones not sorted: %q before %q", got.Zones[i-1].Zone, got.Zones[i].Zone)
				}
			}

			// Upstream's second pass over the same snapshot changes nothing.
			again := Advance(got, tt.nodes, cfg)
			if again.ModeChange != NoModeChange || again.FullDisruptionMode != got.FullDisruptionMode ||
				!reflect.DeepEqual(again.Zones, got.Zones) {
				t.Errorf("second pass changed the result:\n got %+v\nwant %+v", again, got)
			}
		})
	}
}

// TestAdvance checks the rules that depend on the previous pass.
func TestAdvance(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		name       string
		passes     [][]NodeInfo // applied in order from a fresh controller
		want       map[string]wantZone
		wantMode   bool
		wantChange ModeChange
	}{
		{
			name: "Normal to PartialDisruption in a large zone swaps to the secondary rate",
			passes: [][]NodeInfo{
				nodes(zoneA, 60, 0),
				nodes(zoneA, 20, 40),
			},
			want: map[string]wantZone{zoneA: {state: PartialDisruption, notReady: 40, total: 60, rate: 0.01}},
		},
		{
			name: "rate is fixed at the transition: a Partial zone that grows past 50 stays at 0",
			passes: [][]NodeInfo{
				nodes(zoneA, 10, 30), // 40 nodes, Partial, rate 0
				nodes(zoneA, 25, 45), // 70 nodes, still Partial
			},
			want: map[string]wantZone{zoneA: {state: PartialDisruption, notReady: 45, total: 70, rate: 0,
				rateReason: "zone of 40 counted nodes"}},
		},
		{
			name: "recovery: Partial back to Normal restores the normal rate",
			passes: [][]NodeInfo{
				nodes("", 1, 4),
				nodes("", 5, 0),
			},
			want: map[string]wantZone{"": {state: Normal, total: 5, rate: 0.1}},
		},
		{
			name: "entering: the last healthy zone fails",
			passes: [][]NodeInfo{
				join(nodes(zoneA, 0, 3), nodes(zoneB, 2, 0)),
				join(nodes(zoneA, 0, 3), nodes(zoneB, 0, 2)),
			},
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 3, total: 3, rate: 0},
				zoneB: {state: FullDisruption, notReady: 2, total: 2, rate: 0},
			},
			wantMode:   true,
			wantChange: EnteredFullDisruptionMode,
		},
		{
			name: "staying: no change while every zone stays down",
			passes: [][]NodeInfo{
				join(nodes(zoneA, 0, 3), nodes(zoneB, 0, 2)),
				join(nodes(zoneA, 0, 3), nodes(zoneB, 0, 2)),
				join(nodes(zoneA, 0, 4), nodes(zoneB, 0, 2)),
			},
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 4, total: 4, rate: 0},
				zoneB: {state: FullDisruption, notReady: 2, total: 2, rate: 0},
			},
			wantMode: true,
		},
		{
			name: "exiting: one node returns, every zone's limiter is reset",
			passes: [][]NodeInfo{
				join(nodes(zoneA, 0, 3), nodes(zoneB, 0, 2)),
				join(nodes(zoneA, 1, 2), nodes(zoneB, 0, 2)),
			},
			want: map[string]wantZone{
				zoneA: {state: Normal, notReady: 2, total: 3, rate: 0.1},
				zoneB: {state: FullDisruption, notReady: 2, total: 2, rate: 0.1},
			},
			wantChange: ExitedFullDisruptionMode,
		},
		{
			name: "exiting into PartialDisruption of a small zone: still stopped",
			passes: [][]NodeInfo{
				nodes("", 0, 5),
				nodes("", 1, 4),
			},
			want:       map[string]wantZone{"": {state: PartialDisruption, notReady: 4, total: 5, rate: 0}},
			wantChange: ExitedFullDisruptionMode,
		},
		{
			// Upstream only enters the mode when some zone was not
			// FullDisruption in the previous pass. If the last healthy zone
			// disappears (its nodes deleted or labelled exclude-disruption)
			// instead of failing, the remaining dead zone keeps tainting at
			// the normal rate. A fresh controller would stop it.
			name: "healthy zone removed rather than failed: mode not entered",
			passes: [][]NodeInfo{
				join(nodes(zoneA, 0, 3), nodes(zoneB, 2, 0)),
				join(nodes(zoneA, 0, 3), excluded(nodes(zoneB, 2, 0))),
			},
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 3, total: 3, rate: 0.1},
				zoneB: {state: Initial, excluded: 2, rate: 0.1},
			},
		},
		{
			name: "a new fully disrupted zone during the mode re-enters it",
			passes: [][]NodeInfo{
				nodes(zoneA, 0, 3),
				join(nodes(zoneA, 0, 3), nodes(zoneB, 0, 1)),
			},
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 3, total: 3, rate: 0},
				zoneB: {state: FullDisruption, notReady: 1, total: 1, rate: 0},
			},
			wantMode:   true,
			wantChange: EnteredFullDisruptionMode,
		},
		{
			// The new zone is Initial in upstream's zoneStates, so "all
			// zones were FullDisruption" is false and the exit path (which
			// resets every limiter) is skipped; zoneA did not change state,
			// so its limiter stays at 0 although the mode is over.
			name: "a new healthy zone ends the mode without resetting the dead zone's rate",
			passes: [][]NodeInfo{
				nodes(zoneA, 0, 3),
				join(nodes(zoneA, 0, 3), nodes(zoneB, 1, 0)),
			},
			want: map[string]wantZone{
				zoneA: {state: FullDisruption, notReady: 3, total: 3, rate: 0, rateReason: "every zone is FullDisruption"},
				zoneB: {state: Normal, total: 1, rate: 0.1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Cluster
			for _, snapshot := range tt.passes {
				c = Advance(c, snapshot, cfg)
			}
			checkZones(t, c, tt.want)
			if c.FullDisruptionMode != tt.wantMode {
				t.Errorf("FullDisruptionMode = %v, want %v", c.FullDisruptionMode, tt.wantMode)
			}
			if c.ModeChange != tt.wantChange {
				t.Errorf("ModeChange = %v, want %v", c.ModeChange, tt.wantChange)
			}
		})
	}
}

func TestAdvanceDoesNotModifyPrev(t *testing.T) {
	cfg := DefaultConfig()
	prev := Evaluate(nodes(zoneA, 5, 0), cfg)
	saved := fmt.Sprintf("%+v", prev)
	_ = Advance(prev, nodes(zoneA, 0, 5), cfg)
	if got := fmt.Sprintf("%+v", prev); got != saved {
		t.Errorf("Advance modified prev:\n got %s\nwant %s", got, saved)
	}
}

func TestEvictionETA(t *testing.T) {
	tests := []struct {
		name           string
		rate           float64
		ahead          int
		wantOK         bool
		earliest, late time.Duration
	}{
		{name: "rate 0: never", rate: 0, ahead: 0},
		{name: "negative rate: never", rate: -1, ahead: 0},
		{name: "NaN rate: never", rate: func() float64 { var z float64; return z / z }(), ahead: 0},
		{name: "too slow for a Duration", rate: 1e-300, ahead: 1},
		{name: "head of a Normal zone", rate: 0.1, ahead: 0, wantOK: true, earliest: 0, late: 10*time.Second + TaintPassPeriod},
		{name: "3 ahead in a Normal zone", rate: 0.1, ahead: 3, wantOK: true, earliest: 30 * time.Second, late: 40*time.Second + TaintPassPeriod},
		{name: "2 ahead at the secondary rate", rate: 0.01, ahead: 2, wantOK: true, earliest: 200 * time.Second, late: 300*time.Second + TaintPassPeriod},
		{name: "negative ahead treated as 0", rate: 1, ahead: -4, wantOK: true, earliest: 0, late: time.Second + TaintPassPeriod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			earliest, latest, ok := EvictionETA(tt.rate, tt.ahead)
			if ok != tt.wantOK || earliest != tt.earliest || latest != tt.late {
				t.Errorf("EvictionETA(%g, %d) = (%v, %v, %v), want (%v, %v, %v)",
					tt.rate, tt.ahead, earliest, latest, ok, tt.earliest, tt.late, tt.wantOK)
			}
		})
	}

	// The seed: a stranded pod's node in a PartialDisruption zone of 5.
	z, _ := Evaluate(nodes("", 1, 4), DefaultConfig()).Zone("")
	if _, _, ok := EvictionETA(z.Rate, 0); ok {
		t.Errorf("seed S1 zone rate %g: want no eviction ETA", z.Rate)
	}
}

func TestModeChangeString(t *testing.T) {
	for m, want := range map[ModeChange]string{
		NoModeChange:              "NoModeChange",
		EnteredFullDisruptionMode: "EnteredFullDisruptionMode",
		ExitedFullDisruptionMode:  "ExitedFullDisruptionMode",
		ModeChange(7):             "ModeChange(7)",
	} {
		if got := m.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

// BenchmarkEvaluate evaluates 5,000 nodes in 3 zones: one healthy, one in
// PartialDisruption, one fully down.
func BenchmarkEvaluate(b *testing.B) {
	cfg := DefaultConfig()
	all := make([]NodeInfo, 0, 5000)
	for i := 0; i < 5000; i++ {
		n := NodeInfo{Name: fmt.Sprintf("node-%d", i), Ready: true}
		switch i % 3 {
		case 0:
			n.Zone = zoneA
			n.Ready = i%100 != 0
		case 1:
			n.Zone = zoneB
			n.Ready = i%5 == 1
		case 2:
			n.Zone = zoneC
			n.Ready = false
		}
		n.ExcludedFromDisruption = i%1000 == 0
		all = append(all, n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c := Evaluate(all, cfg)
		if len(c.Zones) != 3 {
			b.Fatalf("got %d zones", len(c.Zones))
		}
	}
}

func TestFullDisruptionEnd(t *testing.T) {
	type node struct {
		ready bool
		since time.Time
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	read := func(n node) (bool, time.Time) { return n.ready, n.since }
	for _, tc := range []struct {
		name  string
		nodes []node
		want  time.Time
	}{
		{"no node Ready", []node{{false, t0}, {false, t0.Add(time.Second)}}, time.Time{}},
		{"the earliest Ready transition; NotReady ones do not count", []node{{true, t0.Add(2 * time.Second)}, {false, t0}, {true, t0.Add(time.Second)}}, t0.Add(time.Second)},
		{"a Ready node without a transition time: unknown", []node{{true, t0}, {true, time.Time{}}}, time.Time{}},
		{"no nodes", nil, time.Time{}},
	} {
		if got := FullDisruptionEnd(tc.nodes, read); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
