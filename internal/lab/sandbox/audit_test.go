package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWaitAuditEventsWaitsForTheLog: the apiserver logs a request's
// ResponseComplete after it answered; a wait for an event that is not in
// the log yet returns once a later write puts it there, and one that
// never comes ends with the context's error and what was read.
func TestWaitAuditEventsWaitsForTheLog(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755))
	path := c.LogPath(AuditLog)
	line := func(verb, name string) string {
		return `{"verb":"` + verb + `","stage":"ResponseComplete","objectRef":{"resource":"nodes","name":"` + name + `"}}` + "\n"
	}
	must(os.WriteFile(path, []byte(line("get", "node-3")+`{"verb":"patch","stage":"RequestReceived","objectRef":{"resource":"nodes","name":"node-3"}}`+"\n"), 0o644))
	patches := func(e AuditEvent) bool { return e.Verb == "patch" && e.ObjectRef.Name == "node-3" }
	one := func(evs []AuditEvent) bool { return len(evs) >= 1 }

	go func() {
		time.Sleep(300 * time.Millisecond) // the write lands after the first reads
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, _ = f.WriteString(line("patch", "node-3"))
			_ = f.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := c.WaitAuditEvents(ctx, patches, one)
	must(err)
	if len(evs) != 1 || evs[0].Stage != "ResponseComplete" {
		t.Fatalf("read %+v, want the one completed patch", evs)
	}

	short, cancel2 := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel2()
	evs, err = c.WaitAuditEvents(short, patches, func(evs []AuditEvent) bool { return len(evs) >= 2 })
	if err == nil || len(evs) != 1 {
		t.Fatalf("a second patch that never comes: got %d events, err %v; want the one read and the deadline's error", len(evs), err)
	}
}
