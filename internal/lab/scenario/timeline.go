// Package scenario plays the design's scenarios (S1, S3, …) on a sandbox and
// records what the cluster did, when. The demo prints the recording as it
// happens; the e2e tests assert on it. Both run the same code, so what the
// demo shows is what the tests prove.
package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Event is one thing that happened during a scenario.
type Event struct {
	// At is the time since the scenario started.
	At time.Duration `json:"at"`
	// Kind is one of: step (what the scenario did), node, zone, pod,
	// workload.
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
}

// MarshalJSON writes At in seconds, which is what a person or a plotting
// script wants to read.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	return json.Marshal(struct {
		plain
		At float64 `json:"at"`
	}{plain(e), e.At.Seconds()})
}

// Timeline collects events and, if it has a writer, prints each one as it
// is added. It is safe for concurrent use.
type Timeline struct {
	start time.Time
	out   io.Writer
	now   func() time.Time

	mu     sync.Mutex
	events []Event
}

// NewTimeline starts a timeline now. out may be nil.
func NewTimeline(out io.Writer) *Timeline {
	return &Timeline{start: time.Now(), out: out, now: time.Now}
}

// Since returns the time elapsed on the timeline.
func (t *Timeline) Since() time.Duration { return t.now().Sub(t.start) }

// Add records an event now.
func (t *Timeline) Add(kind, subject, format string, args ...any) Event {
	e := Event{At: t.Since(), Kind: kind, Subject: subject, Detail: fmt.Sprintf(format, args...)}
	t.mu.Lock()
	t.events = append(t.events, e)
	t.mu.Unlock()
	if t.out != nil {
		fmt.Fprintf(t.out, "%8s  %-8s %-32s %s\n", fmt.Sprintf("+%.1fs", e.At.Seconds()), e.Kind, e.Subject, e.Detail)
	}
	return e
}

// Step records something the scenario itself does.
func (t *Timeline) Step(format string, args ...any) Event {
	return t.Add("step", "", format, args...)
}

// Events returns a copy of the events so far.
func (t *Timeline) Events() []Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Event(nil), t.events...)
}

// At returns the timeline time of a wall-clock time, e.g. an API
// timestamp.
func (t *Timeline) At(wall time.Time) time.Duration { return wall.Sub(t.start) }
