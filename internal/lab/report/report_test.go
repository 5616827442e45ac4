package report

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestWriterFormat(t *testing.T) {
	var b strings.Builder
	w := NewWriter(&b)
	w.Metric("s3_recovery_with_rebound", 33.04, "s")
	w.MetricDecimals("scale100_deadline_to_delete_p50", 0.12345, 3, "s")
	w.MetricDecimals("gossip_30_sent_per_agent", 1234.6, 0, "B/s")
	w.Count("s1_without_rebound_recovered", 0)
	w.Config("s1_without_rebound_observe", 90, "s")
	w.Config("s7_prune_grace", 1.5, "s")
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	want := "METRIC s3_recovery_with_rebound=33.0 s\n" +
		"METRIC scale100_deadline_to_delete_p50=0.123 s\n" +
		"METRIC gossip_30_sent_per_agent=1235 B/s\n" +
		"METRIC s1_without_rebound_recovered=0 count\n" +
		"CONFIG s1_without_rebound_observe=90 s\n" +
		"CONFIG s7_prune_grace=1.5 s\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWriterRefusesInvalidLines(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(*Writer)
	}{
		{"no unit", func(w *Writer) { w.Metric("s4_recovered", 0, "") }},
		{"unit with a space", func(w *Writer) { w.Metric("s6_changes", 3, "changes (bound 4)") }},
		{"empty name", func(w *Writer) { w.Metric("", 1, "s") }},
		{"name with a space", func(w *Writer) { w.Metric("s1 recovery", 1, "s") }},
		{"name with =", func(w *Writer) { w.Config("a=b", 1, "s") }},
		{"name with a newline", func(w *Writer) { w.Count("a\nMETRIC b", 1) }},
		{"NaN", func(w *Writer) { w.Metric("s1_speedup", math.NaN(), "x") }},
		{"infinite", func(w *Writer) { w.Metric("s1_speedup", math.Inf(1), "x") }},
		{"unknown kind", func(w *Writer) { w.Write(Line{Kind: "INFO", Name: "a", Value: "1", Unit: "s"}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			w := NewWriter(&b)
			tc.write(w)
			w.Metric("after", 1, "s")
			if w.Err() == nil {
				t.Error("no error")
			}
			if b.Len() != 0 {
				t.Errorf("wrote %q, want nothing: an invalid line stops the writer", b.String())
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterKeepsTheWriteError(t *testing.T) {
	w := NewWriter(failingWriter{})
	w.Metric("a", 1, "s")
	if err := w.Err(); err == nil || err.Error() != "disk full" {
		t.Errorf("Err() = %v, want the write's error", err)
	}
}

func TestRoundTrip(t *testing.T) {
	lines, err := Lines(func(w *Writer) {
		w.Metric("s1_recovery_with_rebound", 31.6, "s")
		w.Count("s10_pods_deleted", 2)
		w.MetricDecimals("scale100_controller_cpu_per_min", 1.234, 2, "s")
		w.Config("s10_hold", 30, "s")
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Line{
		{Measured, "s1_recovery_with_rebound", "31.6", "s"},
		{Measured, "s10_pods_deleted", "2", "count"},
		{Measured, "scale100_controller_cpu_per_min", "1.23", "s"},
		{Setting, "s10_hold", "30", "s"},
	}
	if len(lines) != len(want) {
		t.Fatalf("Lines = %q, want %d lines", lines, len(want))
	}
	for i, s := range lines {
		got, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if got != want[i] {
			t.Errorf("Parse(%q) = %+v, want %+v", s, got, want[i])
		}
		if got.String() != s {
			t.Errorf("String() = %q, want %q", got.String(), s)
		}
	}
	if v, err := want[0].Float(); err != nil || v != 31.6 {
		t.Errorf("Float() = %v, %v", v, err)
	}
}

func TestParseAllSkipsOtherLines(t *testing.T) {
	out := "=== RUN   TestS1\n" +
		"METRIC s1_recovery_with_rebound=31.6 s\n" +
		"    s1_test.go:40: METRIC in a log message\n" +
		"METRIC s4_recovered=0\n" + // no unit: not a result line
		"CONFIG s1_without_rebound_observe=90 s\n" +
		"--- PASS: TestS1 (120.00s)\n"
	got := ParseAll(out)
	if len(got) != 2 {
		t.Fatalf("ParseAll = %+v, want the METRIC and the CONFIG line", got)
	}
	l, ok := Find(got, "s1_without_rebound_observe")
	if !ok || l.Kind != Setting || l.Value != "90" {
		t.Errorf("Find = %+v, %v", l, ok)
	}
	if _, ok := Find(got, "s4_recovered"); ok {
		t.Error("a line without a unit was read")
	}
}

func TestLinesEmptyAndInvalid(t *testing.T) {
	if got, err := Lines(func(*Writer) {}); err != nil || got != nil {
		t.Errorf("Lines of nothing = %q, %v", got, err)
	}
	if _, err := Lines(func(w *Writer) { w.Metric("a", 1, "") }); err == nil {
		t.Error("Lines of an invalid line: no error")
	}
}
