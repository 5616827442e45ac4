package hoststandin

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// dialHost dials h as a gossip member's host probe does: "answered" when
// the connection completes or is refused (a live kernel), "silent" when
// the dial times out.
func dialHost(t *testing.T, h *Host, timeout time.Duration) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", h.Endpoint(), timeout)
	if err == nil {
		conn.Close()
		return "answered"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "refused"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "silent"
	}
	t.Fatalf("dial %s: %v", h.Endpoint(), err)
	return ""
}

// TestHostSilenceDropsPackets: a live host accepts; a silenced one lets
// dials time out (dropped, never refused), again and again; a revived one
// accepts again; a closed one refuses, as a live kernel without the
// listener would.
func TestHostSilenceDropsPackets(t *testing.T) {
	h, err := Listen("node-0", "127.0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Port == 0 {
		t.Fatal("no port")
	}
	for i := range 3 {
		if got := dialHost(t, h, time.Second); got != "answered" {
			t.Fatalf("dial %d of a live host: %s", i, got)
		}
	}
	if err := h.Silence(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		start := time.Now()
		if got := dialHost(t, h, 500*time.Millisecond); got != "silent" {
			t.Fatalf("dial %d of a silenced host: %s, want silent", i, got)
		}
		if took := time.Since(start); took < 400*time.Millisecond {
			t.Fatalf("dial %d of a silenced host failed after %v: not a timeout", i, took)
		}
	}
	if err := h.Silence(); err != nil {
		t.Fatalf("silence twice: %v", err)
	}
	if err := h.Revive(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := dialHost(t, h, time.Second); got != "answered" {
			t.Fatalf("dial %d of a revived host: %s", i, got)
		}
	}
	// Silenced and revived again: the second time works as the first.
	if err := h.Silence(); err != nil {
		t.Fatal(err)
	}
	if got := dialHost(t, h, 300*time.Millisecond); got != "silent" {
		t.Fatalf("dial of a host silenced a second time: %s", got)
	}
	if err := h.Revive(); err != nil {
		t.Fatal(err)
	}
	if got := dialHost(t, h, time.Second); got != "answered" {
		t.Fatalf("dial of a host revived a second time: %s", got)
	}
	h.Close()
	if got := dialHost(t, h, time.Second); got != "refused" {
		t.Fatalf("dial of a closed host: %s, want refused", got)
	}
}

// TestListenLoopbackOnly: the lab never listens beyond loopback.
func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0", "10.0.0.1", "::1", "node-0"} {
		if h, err := Listen("node-0", addr); err == nil {
			h.Close()
			t.Errorf("Listen(%q) accepted a non-loopback address", addr)
		}
	}
}

// TestSilenceRacesReviveAndClose: a Revive or a Close while a Silence is
// still under way ends it (an error, or a silence already complete),
// never a Silence that waits for ever, and leaves a host that answers
// (revived) or refuses (closed).
func TestSilenceRacesReviveAndClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(h *Host) error
		want string
	}{
		{"revive", func(h *Host) error { return h.Revive() }, "answered"},
		{"close", func(h *Host) error { h.Close(); return nil }, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 10 {
				h, err := Listen("node-0", "127.0.1.1")
				if err != nil {
					t.Fatal(err)
				}
				silenced := make(chan error, 1)
				go func() { silenced <- h.Silence() }()
				// From at once to well into the fill: every stage of Silence.
				time.Sleep(time.Duration(i) * 5 * time.Millisecond)
				if err := tc.end(h); err != nil {
					t.Fatal(err)
				}
				select {
				case <-silenced:
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: Silence still blocked 5s after %s", i, tc.name)
				}
				if tc.name == "revive" {
					// A Silence that completed before the Revive raced
					// nothing; revive again so the host answers either way.
					if err := h.Revive(); err != nil {
						t.Fatal(err)
					}
				}
				if got := dialHost(t, h, time.Second); got != tc.want {
					t.Fatalf("round %d: dial after %s: %s, want %s", i, tc.name, got, tc.want)
				}
				h.Close()
			}
		})
	}
}
