package bird

import (
	"fmt"
	"strings"
	"time"
)

// ParseSince turns a `since` column of `show protocols` or `show bfd
// sessions` into a time. BIRD prints it in its own local time zone, in
// the `timeformat protocol` the configuration chose; the defaults are
//
//	BIRD 1.6: "15:28:39" (less than 20 hours ago), else "2026-11-30"
//	BIRD 2:   "15:28:39.754" (less than 20 hours ago), else "2026-11-30"
//
// and `timeformat protocol iso long` (Calico's choice) prints
// "2026-11-30 15:28:39". A time of day belongs to the day of now, or to
// the day before when that would put it more than a minute in the future
// (it was printed before midnight). A date alone is its midnight, and
// exact reports false: the change was at least 20 hours ago, a day's
// precision. loc is BIRD's time zone (time.Local beside BIRD).
func ParseSince(s string, now time.Time, loc *time.Location) (t time.Time, exact bool, err error) {
	s = strings.TrimSpace(s)
	now = now.In(loc)
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, true, nil
		}
	}
	if t, err := time.ParseInLocation("2006-01-02", s, loc); err == nil {
		return t, false, nil
	}
	for _, layout := range []string{"15:04:05.999999999", "15:04"} {
		clock, err := time.ParseInLocation(layout, s, loc)
		if err != nil {
			continue
		}
		t := time.Date(now.Year(), now.Month(), now.Day(), clock.Hour(), clock.Minute(), clock.Second(), clock.Nanosecond(), loc)
		if t.After(now.Add(time.Minute)) {
			t = t.AddDate(0, 0, -1)
		}
		return t, true, nil
	}
	return time.Time{}, false, fmt.Errorf("since %q: want a BIRD time (15:28:39, 15:28:39.754, 2026-11-30 or 2026-11-30 15:28:39)", s)
}

// SinceTime is ParseSince of the protocol's Since column.
func (p Protocol) SinceTime(now time.Time, loc *time.Location) (time.Time, bool, error) {
	return ParseSince(p.Since, now, loc)
}
