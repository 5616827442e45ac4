package scale

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"rebound/internal/controller"
	"rebound/internal/logging"
)

// The bench reads the deadlines back from the log the controller writes
// with --log-format json, through the controller's own logger: a change
// of either side's keys fails here, not in a 20-minute bench run.
func TestOwnDeadlinesReadsTheControllersJSONLog(t *testing.T) {
	var buf bytes.Buffer
	_, log, err := (&logging.Flags{Format: "json"}).Setup(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log = log.WithName("recovery").WithValues("pass", 3)
	first := time.Date(2026, 12, 5, 1, 2, 3, 456789000, time.UTC)
	log.Info(controller.LogMessageRescueAction, "action", "Delete", "object", "ns/a", controller.LogKeyDeadline, first.Format(time.RFC3339Nano))
	// A repeated delete of the same pod: the first one counts.
	log.Info(controller.LogMessageRescueAction, "action", "Delete", "object", "ns/a", controller.LogKeyDeadline, first.Add(time.Minute).Format(time.RFC3339Nano))
	// Not deletes, or no deadline: not counted.
	log.Info(controller.LogMessageRescueAction, "action", "ScaleRestore", "object", "ns/d")
	log.Info(controller.LogMessageRescueAction, "action", "ScaleDown", "object", "ns/d", controller.LogKeyDeadline, first.Format(time.RFC3339Nano))
	log.Info("rescue held", "object", "ns/b", controller.LogKeyDeadline, first.Format(time.RFC3339Nano))
	buf.WriteString("not json at all\n")
	path := filepath.Join(t.TempDir(), "controller.log")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := ownDeadlines(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got["ns/a"].Equal(first) {
		t.Errorf("ownDeadlines = %v, want only ns/a at %s\nlog:\n%s", got, first.Format(time.RFC3339Nano), buf.String())
	}

	bad := filepath.Join(t.TempDir(), "bad.log")
	line := `{"msg":"` + controller.LogMessageRescueAction + `","action":"Delete","object":"ns/a","deadline":"yesterday"}` + "\n"
	if err := os.WriteFile(bad, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ownDeadlines(bad); err == nil {
		t.Error("an unreadable deadline was accepted")
	}
}
