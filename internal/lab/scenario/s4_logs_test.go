package scenario

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestLogLine(t *testing.T) {
	for line, want := range map[string]string{
		`time=2026-01-02T03:04:05.000Z level=INFO msg="peer set published" generation=2 members=3`:                                           "peer set published generation=2 members=3",
		`time=2026-01-02T03:04:05.000Z level=WARN msg="kept \"last\" good" why="a b"`:                                                        `kept "last" good level=WARN why="a b"`,
		`time=x level=INFO msg=Starting controller=peering-s4 controllerGroup="" controllerKind=Node namespace="" name=node-4 reconcileID=1`: "Starting name=node-4",
		`not slog at all`: "not slog at all",
	} {
		if got := logLine(line); got != want {
			t.Errorf("logLine(%s) = %q, want %q", line, got, want)
		}
	}
}

// TestLogLinesFromSlog feeds a real slog text handler, in pieces, and
// reads the timeline: one event per line, none for a partial line.
func TestLogLinesFromSlog(t *testing.T) {
	tl := NewTimeline(nil)
	w := newLogLines(tl, "agent node-4")
	log := slog.New(slog.NewTextHandler(w, nil))
	log.Info("BIRD reconfigured", "generation", 3, "peers", []string{"node-3", "node-5"})
	log.Error("BIRD reload failed", "error", fmt.Errorf("exit status 1"))
	_, _ = w.Write([]byte("time=x level=INFO msg=half"))
	ev := tl.Events()
	if len(ev) != 2 {
		t.Fatalf("%d events, want 2: %v", len(ev), ev)
	}
	if ev[0].Kind != "log" || ev[0].Subject != "agent node-4" || ev[0].Detail != "BIRD reconfigured generation=3 peers=\"[node-3 node-5]\"" {
		t.Errorf("first event %+v", ev[0])
	}
	if !strings.HasPrefix(ev[1].Detail, "BIRD reload failed level=ERROR error=") {
		t.Errorf("second event %+v", ev[1])
	}
}
