// Package birdtest runs real BIRD daemons for tests: it finds the BIRD 1.6
// and BIRD 2 binaries that hack/install-bird.sh installs, checks
// configuration files with the daemon's own parser, and starts instances on
// loopback addresses with their control socket in a test directory.
//
// Rules it enforces, because tests share the machine with other work:
// instances listen on 127.0.0.0/8 only, on ports chosen free at run time;
// they are stopped by the PID this package started, never by name; and a
// missing binary fails the test with the install hint (set
// REBOUND_SKIP_BIRD=1 to skip instead).
package birdtest

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"rebound/internal/lab/birdproc"
	"rebound/pkg/peering/bird"
)

// Environment variables read by Find and Require.
const (
	// EnvBird2 is the path of the BIRD 2 daemon; its birdc is beside it.
	EnvBird2 = birdproc.EnvBird2
	// EnvSkip, when "1", turns a missing BIRD into a skipped test.
	EnvSkip = "REBOUND_SKIP_BIRD"
	// DefaultBird2 is where hack/install-bird.sh unpacks BIRD 2.
	DefaultBird2 = birdproc.DefaultBird2
	// DefaultBird16 is where Debian's "bird" package puts BIRD 1.6.
	DefaultBird16 = birdproc.DefaultBird16
)

// installHint tells what to do when a binary is missing.
const installHint = birdproc.InstallHint + " (or set " + EnvSkip + "=1 to skip the tests that need them)"

// Binaries are one BIRD version's daemon and client.
type Binaries = birdproc.Binaries

// Find locates the binaries of version v (see birdproc.Find).
func Find(v bird.Version) (Binaries, error) { return birdproc.Find(v) }

// Require returns the binaries of version v or ends the test: Fatal with
// the install hint, or Skip when REBOUND_SKIP_BIRD=1.
func Require(t testing.TB, v bird.Version) Binaries {
	t.Helper()
	b, err := Find(v)
	if err == nil {
		return b
	}
	if os.Getenv(EnvSkip) == "1" {
		t.Skipf("%v (%s=1)", err, EnvSkip)
	}
	t.Fatalf("%v: %s", err, installHint)
	return Binaries{}
}

// FreePort returns a TCP port that was free on addr a moment ago. addr must
// be a loopback address: tests never listen elsewhere.
func FreePort(t testing.TB, addr netip.Addr) uint16 {
	t.Helper()
	if !addr.IsLoopback() {
		t.Fatalf("FreePort(%s): tests run BIRD on loopback addresses only", addr)
	}
	for {
		l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		if err != nil {
			t.Fatalf("find a free port on %s: %v", addr, err)
		}
		port := uint16(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		if port != bird.DefaultBGPPort {
			return port
		}
	}
}

// Options change how Start runs the daemon.
type Options struct {
	// Recovery starts BIRD in graceful-restart recovery (`bird -R`), as
	// calico-node does.
	Recovery bool
	// NetNS runs the daemon in this network namespace.
	NetNS string
}

// Daemon is one BIRD process started by Start.
type Daemon struct {
	*birdproc.Daemon
	Socket string // control socket path
}

// Start runs the daemon in the foreground (-f) so that the process this
// test started is the daemon itself, with its control socket in a fresh
// test directory, and waits until the socket answers. The daemon is
// stopped when the test ends.
func Start(t testing.TB, b Binaries, configPath string, opts Options) *Daemon {
	t.Helper()
	dir := t.TempDir()
	if len(dir) > 90 { // a unix socket path holds at most 107 bytes
		short, err := os.MkdirTemp("", "bird")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(short) })
		dir = short
	}
	socket := filepath.Join(dir, "bird.ctl")
	d, err := birdproc.Start(context.Background(), b, configPath, birdproc.Options{Recovery: opts.Recovery, NetNS: opts.NetNS, Socket: socket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("stop BIRD pid %d: %v", d.PID(), err)
		}
	})
	return &Daemon{Daemon: d, Socket: socket}
}

// Query sends one command over the control socket, the way an agent reads
// BIRD without birdc, and returns the coded reply, welcome line included.
func (d *Daemon) Query(command string) (string, error) {
	return d.Client().Query(context.Background(), command)
}

// Protocols returns the parsed `show protocols`.
func (d *Daemon) Protocols() ([]bird.Protocol, error) {
	return d.Client().Protocols(context.Background())
}

// Status returns the parsed `show status`.
func (d *Daemon) Status() (bird.Status, error) {
	return d.Client().Status(context.Background())
}

// WaitUntil polls cond every 200 ms until it returns true, or fails the
// test after timeout with cond's last explanation. The timeout is a
// deadline against hangs, not a performance assertion: keep it generous.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v: %s", what, timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
