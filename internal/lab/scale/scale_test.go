package scale

import (
	"math"
	"testing"
)

func TestLayoutPutsTheVictimsZoneInPartialDisruption(t *testing.T) {
	for _, tc := range []struct{ nodes, victims int }{{30, 18}, {100, 60}, {300, 100}, {1000, 100}} {
		sizes, err := Layout(tc.nodes, tc.victims)
		if err != nil {
			t.Fatalf("%d/%d: %v", tc.nodes, tc.victims, err)
		}
		sum := 0
		for _, s := range sizes {
			sum += s
			if s < 1 {
				t.Errorf("%d/%d: empty zone in %v", tc.nodes, tc.victims, sizes)
			}
		}
		// upstream: PartialDisruption when NotReady > 2 and NotReady/total >= 0.55;
		// node-0 is in zone-a and survives.
		if sum != tc.nodes || float64(tc.victims)/float64(sizes[0]) < 0.55 || sizes[0] < tc.victims+1 {
			t.Errorf("%d/%d: sizes %v do not put zone-a in PartialDisruption", tc.nodes, tc.victims, sizes)
		}
	}
	if _, err := Layout(10, 9); err == nil {
		t.Error("9 victims of 10 nodes accepted: no healthy zone left")
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if p := Percentile(xs, 50); p != 3 {
		t.Errorf("p50 = %v, want 3", p)
	}
	if p := Percentile(xs, 99); p != 5 {
		t.Errorf("p99 = %v, want 5", p)
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("percentile of nothing is a number")
	}
}
