package peering

import (
	"testing"
	"time"
)

func TestSessionReportRoundTripAndFreshness(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := SessionReport{Time: now, Sessions: map[string]string{"b": "Established", "c": "Active"}}
	got, err := ParseSessionReport(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameSessions(r) || !got.Time.Equal(now) {
		t.Errorf("round trip: %+v", got)
	}
	if up := got.Established(); !up["b"] || up["c"] || len(up) != 2 {
		t.Errorf("Established() = %v", up)
	}
	if (SessionReport{Time: now, Error: "down"}).Established() != nil {
		t.Error("a report without sessions must say nothing")
	}
	for _, tc := range []struct {
		at    time.Time
		fresh bool
	}{
		{now, true}, {now.Add(time.Minute), true}, {now.Add(time.Minute + 1), false}, {now.Add(-2 * time.Minute), false},
	} {
		if r.Fresh(tc.at, time.Minute) != tc.fresh {
			t.Errorf("Fresh at %v = %v, want %v", tc.at.Sub(now), !tc.fresh, tc.fresh)
		}
	}
	if _, err := ParseSessionReport(`{"sessions":{}}`); err == nil {
		t.Error("a report without time was accepted")
	}
	if _, err := ParseSessionReport(`not json`); err == nil {
		t.Error("garbage accepted")
	}
}
