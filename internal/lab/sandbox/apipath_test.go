package sandbox

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer echoes every line and counts the connections it accepted.
func echoServer(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String(), &accepted
}

// waitConns waits until p holds n connections.
func waitConns(t *testing.T, p *APIPath, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		got := len(p.conns)
		p.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the path holds %d connections after 10s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
}

// TestAPIPathCutAndRestore: a path forwards; a cut holds the connection
// open (Restore then closes it) and never dials the server for a
// connection made during it; after Restore, a new connection forwards.
func TestAPIPathCutAndRestore(t *testing.T) {
	target, accepted := echoServer(t)
	p, err := OpenAPIPath(target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := p.ln.Addr().String()

	before, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	rb := bufio.NewReader(before)
	roundTrip(t, before, rb, "before")

	p.Cut()
	if !p.IsCut() {
		t.Fatal("IsCut after Cut: false")
	}
	during, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("a connection during the cut is refused (%v): want accepted and dropped", err)
	}
	defer during.Close()
	// Dial returns once the kernel accepts; the path takes the
	// connection on a moment later. Restore before that would forward it.
	waitConns(t, p, 2)
	if _, err := before.Write([]byte("lost\n")); err != nil {
		t.Fatalf("a write on a held connection failed at once: %v", err)
	}
	if _, err := during.Write([]byte("lost\n")); err != nil {
		t.Fatalf("a write on a connection made during the cut failed at once: %v", err)
	}

	p.Restore()
	// The held connections end without having carried the lost lines.
	for name, c := range map[string]net.Conn{"held": before, "made during the cut": during} {
		b, err := io.ReadAll(c)
		if err != nil && len(b) == 0 {
			continue // reset: closed, nothing carried
		}
		if len(b) != 0 {
			t.Errorf("the %s connection carried %q through the cut", name, b)
		}
	}
	after, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	roundTrip(t, after, bufio.NewReader(after), "after")
	if n := accepted.Load(); n != 2 {
		t.Errorf("the server accepted %d connections, want 2 (before and after the cut, none during it)", n)
	}
}
