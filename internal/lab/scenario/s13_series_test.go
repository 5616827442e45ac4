package scenario

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Summary
	}{
		{"none", nil, Summary{}},
		{"one", []time.Duration{7 * s}, Summary{N: 1, Median: 7 * s, Worst: 7 * s}},
		{"odd, unsorted", []time.Duration{9 * s, 2 * s, 5 * s}, Summary{N: 3, Median: 5 * s, Worst: 9 * s}},
		{"even: the mean of the middle two", []time.Duration{4 * s, 1 * s, 10 * s, 6 * s}, Summary{N: 4, Median: 5 * s, Worst: 10 * s}},
		{"one outlier moves the worst, not the median", []time.Duration{3 * s, 3 * s, 3 * s, 3 * s, 90 * s}, Summary{N: 5, Median: 3 * s, Worst: 90 * s}},
		{"equal values", []time.Duration{2 * s, 2 * s}, Summary{N: 2, Median: 2 * s, Worst: 2 * s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tc.in...)
			if got := Summarize(tc.in); got != tc.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
			for i := range in {
				if in[i] != tc.in[i] {
					t.Fatalf("Summarize reordered its input: %v, was %v", tc.in, in)
				}
			}
		})
	}
}

func TestS13SeriesPairWrite(t *testing.T) {
	s := time.Second
	p := S13SeriesPair{
		Without: S13Result{Verdict: 48 * s, EndpointsOff: 49 * s, ReplacementReady: 348 * s},
		With: []S13Death{
			{S13Result: S13Result{Verdict: 4 * s, EndpointsOff: 5 * s, ReplacementReady: 4 * s}},
			{S13Result: S13Result{Verdict: 12 * s, EndpointsOff: 13 * s, ReplacementReady: 12 * s}},
			{S13Result: S13Result{Verdict: 8 * s, EndpointsOff: 9 * s, ReplacementReady: 8 * s}},
		},
	}
	lines, err := p.Lines()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"METRIC detect_deaths=3 count",
		"METRIC detect_death_to_replacement_ready_median=8.0 s",
		"METRIC detect_death_to_replacement_ready_worst=12.0 s",
		"METRIC detect_death_to_endpoints_off_median=9.0 s",
		"METRIC detect_death_to_endpoints_off_worst=13.0 s",
		"METRIC s13_death_to_replacement_ready_without_rebound=348.0 s",
		"METRIC s13_speedup=43.5 x",
	} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("no line %q in\n%v", want, lines)
		}
	}
}
