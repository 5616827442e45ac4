package agent

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"rebound/pkg/peering/bird"
)

// fakeControl answers Configure with the queued errors (nil when the queue
// is empty) and records what the include file held at each call.
type fakeControl struct {
	mu      sync.Mutex
	path    string
	errs    []error
	seen    []string // file content at each Configure
	protos  []bird.Protocol
	protErr error
}

func (f *fakeControl) Configure(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, _ := os.ReadFile(f.path)
	f.seen = append(f.seen, string(data))
	if len(f.errs) == 0 {
		return nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

func (f *fakeControl) Protocols(context.Context) ([]bird.Protocol, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.protos, f.protErr
}

// Status answers with a fixed server time: protocols' since times in the
// tests are 15:40:19 (20 s before it).
func (f *fakeControl) Status(context.Context) (bird.Status, error) {
	return bird.Status{Version: "1.6.8", ServerTime: "2026-01-01 15:40:39", Daemon: "Daemon is up and running"}, nil
}

func (f *fakeControl) configures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

func testBase() bird.MeshConfig {
	return bird.MeshConfig{Version: bird.Bird16, NodeName: "node-a", Address: netip.MustParseAddr("10.0.0.1"), AS: 64512}
}

func peersOf(names ...string) []bird.Peer {
	var out []bird.Peer
	for i, n := range names {
		out = append(out, bird.Peer{Name: n, Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 2)})})
	}
	return out
}

func newTestSyncer(t *testing.T) (*Syncer, *fakeControl) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mesh.conf")
	fc := &fakeControl{path: path}
	s, err := NewSyncer(path, fc, testBase())
	if err != nil {
		t.Fatal(err)
	}
	return s, fc
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestSyncWritesReloadsAndSkipsUnchanged(t *testing.T) {
	s, fc := newTestSyncer(t)
	ctx := context.Background()
	got, err := s.Sync(ctx, peersOf("node-b", "node-c"))
	if got != Reloaded || err != nil {
		t.Fatalf("first sync = %s, %v; want Reloaded", got, err)
	}
	if !strings.Contains(fc.seen[0], "node-b") || !strings.Contains(fc.seen[0], "node-c") {
		t.Fatalf("BIRD was reloaded before the file held the set:\n%s", fc.seen[0])
	}
	// The same set again, in another order: same bytes, no write, no reload.
	if got, err := s.Sync(ctx, peersOf("node-b", "node-c")); got != Unchanged || err != nil {
		t.Fatalf("second sync = %s, %v; want Unchanged", got, err)
	}
	if fc.configures() != 1 {
		t.Fatalf("configure called %d times, want 1", fc.configures())
	}
	if got, _ := s.Sync(ctx, peersOf("node-b")); got != Reloaded {
		t.Fatalf("sync after a change = %s, want Reloaded", got)
	}
	if c := readFile(t, s.Path()); strings.Contains(c, "node-c") {
		t.Errorf("node-c still in the file after it left the set")
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Dir(s.Path()))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries, want only the mesh file", len(entries))
	}
}

func TestSyncRejectedRestoresLastGood(t *testing.T) {
	s, fc := newTestSyncer(t)
	ctx := context.Background()
	if got, _ := s.Sync(ctx, peersOf("node-b", "node-c")); got != Reloaded {
		t.Fatal(got)
	}
	good := readFile(t, s.Path())
	fc.errs = []error{&bird.ConfigError{Message: "/etc/bird/mesh.conf:3:55 syntax error"}}
	got, err := s.Sync(ctx, peersOf("node-b"))
	if got != Rejected || err == nil {
		t.Fatalf("sync = %s, %v; want Rejected with an error", got, err)
	}
	if !strings.Contains(err.Error(), "syntax error") || !strings.Contains(err.Error(), "last configuration BIRD accepted is back") {
		t.Errorf("error does not explain: %v", err)
	}
	if readFile(t, s.Path()) != good {
		t.Errorf("the rejected configuration stayed in place")
	}
	// Retrying the same set tries BIRD again (it was never applied).
	if got, err := s.Sync(ctx, peersOf("node-b")); got != Reloaded || err != nil {
		t.Fatalf("retry = %s, %v; want Reloaded", got, err)
	}
}

func TestSyncUnreachableKeepsLastGoodAndNamesSocket(t *testing.T) {
	s, fc := newTestSyncer(t)
	ctx := context.Background()
	if got, _ := s.Sync(ctx, peersOf("node-b", "node-c")); got != Reloaded {
		t.Fatal(got)
	}
	good := readFile(t, s.Path())
	fc.errs = []error{&bird.UnreachableError{Socket: "/run/bird/bird.ctl", Err: errors.New("connection refused")}}
	got, err := s.Sync(ctx, peersOf("node-b"))
	if got != Unreachable || err == nil || !strings.Contains(err.Error(), "/run/bird/bird.ctl") {
		t.Fatalf("sync = %s, %v; want Unreachable naming the socket", got, err)
	}
	if readFile(t, s.Path()) != good {
		t.Errorf("an unapplied configuration stayed in place while BIRD was unreachable")
	}
}

func TestSyncExistingFileIsLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.conf")
	if err := os.WriteFile(path, []byte("# what BIRD runs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fc := &fakeControl{path: path, errs: []error{&bird.ConfigError{Message: "boom"}}}
	s, err := NewSyncer(path, fc, testBase())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Sync(context.Background(), peersOf("node-b")); got != Rejected {
		t.Fatalf("sync = %s, want Rejected", got)
	}
	if got := readFile(t, path); got != "# what BIRD runs\n" {
		t.Errorf("file = %q, want the one found at start", got)
	}
}

func TestSyncInvalidPeerWritesNothing(t *testing.T) {
	s, fc := newTestSyncer(t)
	bad := peersOf("node-b")
	bad[0].Name = `evil"; protocol x {`
	got, err := s.Sync(context.Background(), bad)
	if got != Invalid || err == nil || !strings.Contains(err.Error(), "peers[0].name") {
		t.Fatalf("sync = %s, %v; want Invalid naming peers[0].name", got, err)
	}
	if fc.configures() != 0 {
		t.Error("BIRD reloaded for an invalid set")
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Errorf("file written for an invalid set (stat: %v)", err)
	}
}
