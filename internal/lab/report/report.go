// Package report is the one writer (and reader) of the lab's result
// lines, the form tools collect from the e2e tests, the bench and the
// demo:
//
//	METRIC <name>=<value> <unit>   a measured value
//	CONFIG <name>=<value> <unit>   a setting the run was played with
//
// Measured values and settings are kept apart so that nobody reads a
// timeout as a result. Every line has a unit: a figure without one cannot
// be compared across runs, so the writer refuses it, as it refuses a name
// that a reader would split wrongly and a value that is not a number.
package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Kind says whether a line is a measurement or a setting.
type Kind string

const (
	// Measured is a value the run measured.
	Measured Kind = "METRIC"
	// Setting is a value the run was configured with.
	Setting Kind = "CONFIG"
)

// Line is one result line.
type Line struct {
	Kind Kind
	Name string
	// Value is the number as written (its precision is the writer's
	// choice, so a reader compares what was printed).
	Value string
	Unit  string
}

// String is the line as written, without the newline.
func (l Line) String() string {
	return fmt.Sprintf("%s %s=%s %s", l.Kind, l.Name, l.Value, l.Unit)
}

// Float is the line's value as a number.
func (l Line) Float() (float64, error) { return strconv.ParseFloat(l.Value, 64) }

// Validate says why the line cannot be written, or nil.
func (l Line) Validate() error {
	if l.Kind != Measured && l.Kind != Setting {
		return fmt.Errorf("line %q: kind %q is neither %s nor %s", l.Name, l.Kind, Measured, Setting)
	}
	if err := checkWord("name", l.Name); err != nil {
		return err
	}
	if strings.ContainsRune(l.Name, '=') {
		return fmt.Errorf("%s name %q contains '='", l.Kind, l.Name)
	}
	v, err := l.Float()
	if err != nil {
		return fmt.Errorf("%s %s: value %q is not a number", l.Kind, l.Name, l.Value)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%s %s: value %s is not finite", l.Kind, l.Name, l.Value)
	}
	if err := checkWord("unit of "+l.Name, l.Unit); err != nil {
		return err
	}
	return nil
}

// checkWord requires s to be one non-empty word of printable characters.
func checkWord(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%s %q contains a space or a control character", what, s)
		}
	}
	return nil
}

// Parse reads one line as written by a Writer (surrounding space
// ignored). It fails on anything else, so a reader never takes a log
// line for a result.
func Parse(s string) (Line, error) {
	s = strings.TrimSpace(s)
	kind, rest, ok := strings.Cut(s, " ")
	if !ok {
		return Line{}, fmt.Errorf("not a result line: %q", s)
	}
	nameValue, unit, ok := strings.Cut(rest, " ")
	if !ok {
		return Line{}, fmt.Errorf("result line without a unit: %q", s)
	}
	name, value, ok := strings.Cut(nameValue, "=")
	if !ok {
		return Line{}, fmt.Errorf("result line without name=value: %q", s)
	}
	l := Line{Kind: Kind(kind), Name: name, Value: value, Unit: unit}
	if err := l.Validate(); err != nil {
		return Line{}, err
	}
	return l, nil
}

// ParseAll returns the result lines of text (a test's or a bench's
// output), skipping every other line.
func ParseAll(text string) []Line {
	var out []Line
	for _, s := range strings.Split(text, "\n") {
		if l, err := Parse(s); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// Find returns the first line of lines with name.
func Find(lines []Line, name string) (Line, bool) {
	for _, l := range lines {
		if l.Name == name {
			return l, true
		}
	}
	return Line{}, false
}

// Writer writes result lines to an io.Writer. It keeps the first error
// (an invalid line or a failed write) and writes nothing after it, so a
// caller writes its lines and checks Err once.
type Writer struct {
	w   io.Writer
	err error
}

// NewWriter writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Err is the first error, or nil.
func (w *Writer) Err() error { return w.err }

// Metric writes a measured value to one decimal, the precision of the
// recovery times.
func (w *Writer) Metric(name string, value float64, unit string) {
	w.MetricDecimals(name, value, 1, unit)
}

// MetricDecimals writes a measured value to the given number of decimals.
func (w *Writer) MetricDecimals(name string, value float64, decimals int, unit string) {
	w.Write(Line{Kind: Measured, Name: name, Value: strconv.FormatFloat(value, 'f', max(decimals, 0), 64), Unit: unit})
}

// Count writes a measured count.
func (w *Writer) Count(name string, n int) {
	w.Write(Line{Kind: Measured, Name: name, Value: strconv.Itoa(n), Unit: "count"})
}

// Config writes a setting, in the fewest digits that are exact: a
// setting is chosen, not measured, so it has no precision to round to.
func (w *Writer) Config(name string, value float64, unit string) {
	w.Write(Line{Kind: Setting, Name: name, Value: strconv.FormatFloat(value, 'f', -1, 64), Unit: unit})
}

// Write writes one line, unless it is invalid or an earlier one failed.
func (w *Writer) Write(l Line) {
	if w.err != nil {
		return
	}
	if err := l.Validate(); err != nil {
		w.err = err
		return
	}
	if _, err := io.WriteString(w.w, l.String()+"\n"); err != nil {
		w.err = err
	}
}

// Lines collects the lines write writes, for results that carry their
// lines as text (the demo's JSON report).
func Lines(write func(*Writer)) ([]string, error) {
	var b strings.Builder
	w := NewWriter(&b)
	write(w)
	if err := w.Err(); err != nil {
		return nil, err
	}
	text := strings.TrimSuffix(b.String(), "\n")
	if text == "" {
		return nil, nil
	}
	return strings.Split(text, "\n"), nil
}
