package restore

import (
	"fmt"
	"io"
	"time"
)

// progress prints a bring-up for a person: one line per change, each with
// the time since the start. Repeated observations of the same state are
// not printed again.
type progress struct {
	w     io.Writer
	start time.Time
	now   func() time.Time
	last  map[string]string
}

func (p *progress) since() float64 { return p.now().Sub(p.start).Seconds() }

func (p *progress) header(format string, args ...any) {
	fmt.Fprintf(p.w, format+"\n", args...)
}

// line prints a line unconditionally.
func (p *progress) line(_ string, format string, args ...any) {
	fmt.Fprintf(p.w, "%8s  %s\n", fmt.Sprintf("+%.1fs", p.since()), fmt.Sprintf(format, args...))
}

// change prints a line when key's state differs from the last one printed,
// and reports whether it printed.
func (p *progress) change(key, state, format string, args ...any) bool {
	if prev, ok := p.last[key]; ok && prev == state {
		return false
	}
	p.last[key] = state
	p.line(key, format, args...)
	return true
}
