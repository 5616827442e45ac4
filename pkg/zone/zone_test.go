package zone

import (
	"errors"
	"strings"
	"testing"
)

// nodes returns ready Ready nodes then notReady NotReady nodes in zone.
func nodes(zone string, ready, notReady int) []NodeInfo {
	out := make([]NodeInfo, 0, ready+notReady)
	for i := 0; i < ready; i++ {
		out = append(out, NodeInfo{Name: "ready", Zone: zone, Ready: true})
	}
	for i := 0; i < notReady; i++ {
		out = append(out, NodeInfo{Name: "down", Zone: zone})
	}
	return out
}

// excluded marks every node as carrying the exclude-disruption label.
func excluded(ns []NodeInfo) []NodeInfo {
	for i := range ns {
		ns[i].ExcludedFromDisruption = true
	}
	return ns
}

func TestComputeState(t *testing.T) {
	withThreshold := func(th float64) Config {
		c := DefaultConfig()
		c.UnhealthyZoneThreshold = th
		return c
	}
	controlPlane := NodeFromLabels("controller-0", map[string]string{
		"node-role.kubernetes.io/control-plane": "",
		"node-role.kubernetes.io/master":        "",
	}, true)

	tests := []struct {
		name         string
		nodes        []NodeInfo
		cfg          Config
		want         State
		wantNotReady int
		wantTotal    int
	}{
		{name: "empty zone is Initial", nodes: nil, want: Initial},
		{name: "only excluded nodes is Initial", nodes: excluded(nodes("", 2, 1)), want: Initial},
		{name: "all Ready", nodes: nodes("", 5, 0), want: Normal, wantTotal: 5},
		{name: "seed S1: 4 of 5 NotReady", nodes: nodes("", 1, 4), want: PartialDisruption, wantNotReady: 4, wantTotal: 5},
		{name: "StarlingX seed: 3 of 4 NotReady (0.75)", nodes: nodes("", 1, 3), want: PartialDisruption, wantNotReady: 3, wantTotal: 4},
		{name: "2 of 3 NotReady: needs more than 2", nodes: nodes("", 1, 2), want: Normal, wantNotReady: 2, wantTotal: 3},
		{name: "3 of 6 NotReady: 0.5 < 0.55", nodes: nodes("", 3, 3), want: Normal, wantNotReady: 3, wantTotal: 6},
		{name: "11 of 20 NotReady: exactly 0.55 is enough", nodes: nodes("", 9, 11), want: PartialDisruption, wantNotReady: 11, wantTotal: 20},
		{name: "single node NotReady", nodes: nodes("", 0, 1), want: FullDisruption, wantNotReady: 1, wantTotal: 1},
		{name: "all 5 NotReady", nodes: nodes("", 0, 5), want: FullDisruption, wantNotReady: 5, wantTotal: 5},
		{name: "2 of 2 NotReady is Full, not Normal", nodes: nodes("", 0, 2), want: FullDisruption, wantNotReady: 2, wantTotal: 2},
		{
			name:  "control-plane node counted like any other",
			nodes: append([]NodeInfo{controlPlane}, nodes("", 0, 3)...),
			want:  PartialDisruption, wantNotReady: 3, wantTotal: 4,
		},
		{
			name:  "excluded Ready node does not rescue the zone",
			nodes: append(excluded(nodes("", 3, 0)), nodes("", 0, 3)...),
			want:  FullDisruption, wantNotReady: 3, wantTotal: 3,
		},
		{
			name:  "excluded NotReady nodes do not push the zone into disruption",
			nodes: append(excluded(nodes("", 0, 10)), nodes("", 4, 2)...),
			want:  Normal, wantNotReady: 2, wantTotal: 6,
		},
		{name: "threshold 0: any 3 NotReady", nodes: nodes("", 97, 3), cfg: withThreshold(0), want: PartialDisruption, wantNotReady: 3, wantTotal: 100},
		{name: "threshold above 1 disables PartialDisruption", nodes: nodes("", 1, 9), cfg: withThreshold(1.5), want: Normal, wantNotReady: 9, wantTotal: 10},
		{
			// float32(0.50000002) == 0.5: upstream's float32 comparison says
			// PartialDisruption where float64 arithmetic would say Normal.
			name: "compared in float32 like upstream", nodes: nodes("", 6, 6), cfg: withThreshold(0.50000002),
			want: PartialDisruption, wantNotReady: 6, wantTotal: 12,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg == (Config{}) {
				cfg = DefaultConfig()
			}
			got, notReady, total := ComputeState(tt.nodes, cfg)
			if got != tt.want || notReady != tt.wantNotReady || total != tt.wantTotal {
				t.Errorf("ComputeState = (%v, %d, %d), want (%v, %d, %d)",
					got, notReady, total, tt.want, tt.wantNotReady, tt.wantTotal)
			}
		})
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{
		Initial:           "Initial",
		Normal:            "Normal",
		PartialDisruption: "PartialDisruption",
		FullDisruption:    "FullDisruption",
		State(9):          "State(9)",
	} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

func TestZoneKey(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{name: "nil labels", labels: nil, want: ""},
		{name: "no zone labels", labels: map[string]string{"kubernetes.io/hostname": "n1"}, want: ""},
		{name: "GA labels", labels: map[string]string{LabelTopologyRegion: "r1", LabelTopologyZone: "z1"}, want: "r1:\x00:z1"},
		{name: "beta labels", labels: map[string]string{LabelFailureDomainBetaRegion: "r1", LabelFailureDomainBetaZone: "z1"}, want: "r1:\x00:z1"},
		{name: "zone only", labels: map[string]string{LabelTopologyZone: "z1"}, want: ":\x00:z1"},
		{name: "region only", labels: map[string]string{LabelTopologyRegion: "r1"}, want: "r1:\x00:"},
		{
			name: "beta wins over GA",
			labels: map[string]string{
				LabelFailureDomainBetaZone: "beta-z", LabelTopologyZone: "ga-z",
				LabelFailureDomainBetaRegion: "beta-r", LabelTopologyRegion: "ga-r",
			},
			want: "beta-r:\x00:beta-z",
		},
		{
			name:   "empty beta zone still hides the GA zone",
			labels: map[string]string{LabelFailureDomainBetaZone: "", LabelTopologyZone: "ga-z", LabelTopologyRegion: "r"},
			want:   "r:\x00:",
		},
		{
			name:   "empty beta labels hide GA labels entirely",
			labels: map[string]string{LabelFailureDomainBetaZone: "", LabelFailureDomainBetaRegion: "", LabelTopologyZone: "z", LabelTopologyRegion: "r"},
			want:   "",
		},
		{name: "colons in values stay apart", labels: map[string]string{LabelTopologyRegion: "a:b", LabelTopologyZone: "c"}, want: "a:b:\x00:c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ZoneKeyFromLabels(tt.labels)
			if got != tt.want {
				t.Fatalf("ZoneKeyFromLabels = %q, want %q", got, tt.want)
			}
			region, zone, ok := SplitZoneKey(got)
			if !ok || ZoneKey(region, zone) != got {
				t.Errorf("SplitZoneKey(%q) = (%q, %q, %v), does not round-trip", got, region, zone, ok)
			}
		})
	}
	if ZoneKey("a:b", "c") == ZoneKey("a", "b:c") {
		t.Errorf("ZoneKey must keep a:b/c and a/b:c apart")
	}
}

func TestDisplayZone(t *testing.T) {
	for key, want := range map[string]string{
		"":                  "(no zone)",
		ZoneKey("r", "z"):   "r/z",
		ZoneKey("", "z"):    "/z",
		"not-a-zone-key":    `"not-a-zone-key"`,
		ZoneKey("r", ""):    "r/",
		ZoneKey("a:b", "c"): "a:b/c",
	} {
		if got := DisplayZone(key); got != want {
			t.Errorf("DisplayZone(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestNodeFromLabels(t *testing.T) {
	tests := []struct {
		name         string
		labels       map[string]string
		wantExcluded bool
	}{
		{name: "no label", labels: map[string]string{}, wantExcluded: false},
		{name: "empty value", labels: map[string]string{LabelExcludeDisruption: ""}, wantExcluded: true},
		{name: "value false still excludes", labels: map[string]string{LabelExcludeDisruption: "false"}, wantExcluded: true},
		{name: "control-plane role does not exclude", labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}, wantExcluded: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.labels[LabelTopologyZone] = "z"
			n := NodeFromLabels("n1", tt.labels, true)
			want := NodeInfo{Name: "n1", Zone: ZoneKey("", "z"), Ready: true, ExcludedFromDisruption: tt.wantExcluded}
			if n != want {
				t.Errorf("NodeFromLabels = %+v, want %+v", n, want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	ok := []func(*Config){
		func(c *Config) { *c = Config{} },                     // all zero: tainting off
		func(c *Config) { c.UnhealthyZoneThreshold = 1.5 },    // kcm accepts it
		func(c *Config) { c.LargeClusterSizeThreshold = 0 },   // always secondary rate
		func(c *Config) { c.SecondaryEvictionLimiterQPS = 5 }, // faster than primary
	}
	for i, mod := range ok {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("case %d: Validate(%+v) = %v, want nil", i, c, err)
		}
	}

	nan := func() float64 { var z float64; return z / z }()
	tests := []struct {
		name string
		mod  func(*Config)
		want []string
	}{
		{name: "negative threshold", mod: func(c *Config) { c.UnhealthyZoneThreshold = -0.1 },
			want: []string{"--unhealthy-zone-threshold", "Config.UnhealthyZoneThreshold", "must be >= 0", "0.55"}},
		{name: "NaN threshold", mod: func(c *Config) { c.UnhealthyZoneThreshold = nan },
			want: []string{"--unhealthy-zone-threshold", "is NaN"}},
		{name: "threshold beyond float32", mod: func(c *Config) { c.UnhealthyZoneThreshold = 1e39 },
			want: []string{"--unhealthy-zone-threshold", "float32"}},
		{name: "negative large cluster threshold", mod: func(c *Config) { c.LargeClusterSizeThreshold = -1 },
			want: []string{"--large-cluster-size-threshold", "Config.LargeClusterSizeThreshold", "must be >= 0", "default 50"}},
		{name: "negative eviction rate", mod: func(c *Config) { c.EvictionLimiterQPS = -0.1 },
			want: []string{"--node-eviction-rate", "Config.EvictionLimiterQPS", "default 0.1"}},
		{name: "negative secondary rate", mod: func(c *Config) { c.SecondaryEvictionLimiterQPS = -1 },
			want: []string{"--secondary-node-eviction-rate", "Config.SecondaryEvictionLimiterQPS", "default 0.01"}},
		{
			name: "every bad field reported at once",
			mod: func(c *Config) {
				*c = Config{UnhealthyZoneThreshold: -1, LargeClusterSizeThreshold: -1, EvictionLimiterQPS: -1, SecondaryEvictionLimiterQPS: -1}
			},
			want: []string{"--unhealthy-zone-threshold", "--large-cluster-size-threshold", "--node-eviction-rate", "--secondary-node-eviction-rate"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error", c)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error %q does not mention %q", err, w)
				}
			}
		})
	}

	var joined interface{ Unwrap() []error }
	c := Config{UnhealthyZoneThreshold: -1, LargeClusterSizeThreshold: -1, EvictionLimiterQPS: 0.1}
	if err := c.Validate(); !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Errorf("Validate(%+v) = %v, want 2 joined errors", c, err)
	}
}
