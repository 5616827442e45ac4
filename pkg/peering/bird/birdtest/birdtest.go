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
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rebound/pkg/peering/bird"
)

// Environment variables read by Find and Require.
const (
	// EnvBird2 is the path of the BIRD 2 daemon; its birdc is beside it.
	EnvBird2 = "REBOUND_BIRD2"
	// EnvSkip, when "1", turns a missing BIRD into a skipped test.
	EnvSkip = "REBOUND_SKIP_BIRD"
	// DefaultBird2 is where hack/install-bird.sh unpacks BIRD 2.
	DefaultBird2 = "/opt/rebound/bird2/usr/sbin/bird"
	// DefaultBird16 is where Debian's "bird" package puts BIRD 1.6.
	DefaultBird16 = "/usr/sbin/bird"
)

// installHint tells what to do when a binary is missing.
const installHint = "install BIRD 1.6 and BIRD 2 with `sudo hack/install-bird.sh` " +
	"(or set " + EnvSkip + "=1 to skip the tests that need them)"

// Binaries are one BIRD version's daemon and client.
type Binaries struct {
	Version bird.Version
	Bird    string // the daemon
	Birdc   string // its control client
	Banner  string // what `bird --version` printed, e.g. "BIRD version 1.6.8"
}

// Find locates the binaries of version v. BIRD 1.6 is `bird` on PATH or
// /usr/sbin/bird; BIRD 2 is $REBOUND_BIRD2 or /opt/rebound/bird2/usr/sbin/bird.
// The daemon must report the expected version.
func Find(v bird.Version) (Binaries, error) {
	var daemon string
	switch v {
	case bird.Bird16:
		daemon = DefaultBird16
		if p, err := exec.LookPath("bird"); err == nil {
			daemon = p
		}
	case bird.Bird2:
		daemon = DefaultBird2
		if p := os.Getenv(EnvBird2); p != "" {
			daemon = p
		}
	default:
		return Binaries{}, fmt.Errorf("unknown BIRD version %q", v)
	}
	b := Binaries{Version: v, Bird: daemon, Birdc: filepath.Join(filepath.Dir(daemon), "birdc")}
	for _, p := range []string{b.Bird, b.Birdc} {
		if info, err := os.Stat(p); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return Binaries{}, fmt.Errorf("BIRD %s: %s is missing or not executable", v, p)
		}
	}
	// BIRD prints its version on stderr and exits 0.
	out, err := exec.Command(b.Bird, "--version").CombinedOutput()
	b.Banner = strings.TrimSpace(string(out))
	if err != nil {
		return Binaries{}, fmt.Errorf("BIRD %s: %s --version: %v: %s", v, b.Bird, err, b.Banner)
	}
	want := "BIRD version " + string(v) + "."
	if !strings.HasPrefix(b.Banner, want) {
		return Binaries{}, fmt.Errorf("BIRD %s: %s says %q, want %q...", v, b.Bird, b.Banner, want)
	}
	return b, nil
}

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

// Parse runs the daemon's own configuration parser (`bird -p -c FILE`) and
// returns its complaint, if any.
func (b Binaries) Parse(configPath string) error {
	out, err := exec.Command(b.Bird, "-p", "-c", configPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -p -c %s: %v: %s", b.Bird, configPath, err, strings.TrimSpace(string(out)))
	}
	return nil
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
}

// Daemon is one BIRD process started by Start.
type Daemon struct {
	bins   Binaries
	cmd    *exec.Cmd
	Socket string // control socket path
	log    lockedBuffer
	done   chan struct{}
	stop   sync.Once
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
	d := &Daemon{bins: b, Socket: filepath.Join(dir, "bird.ctl"), done: make(chan struct{})}
	args := []string{"-f", "-c", configPath, "-s", d.Socket}
	if opts.Recovery {
		args = append(args, "-R")
	}
	d.cmd = exec.Command(b.Bird, args...)
	d.cmd.Stdout, d.cmd.Stderr = &d.log, &d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", b.Bird, err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("stop BIRD pid %d: %v", d.PID(), err)
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := d.Query("show status"); err == nil {
			return d
		} else if time.Now().After(deadline) {
			t.Fatalf("BIRD pid %d: control socket %s did not answer in 30 s: %v\nlog:\n%s", d.PID(), d.Socket, err, d.Log())
		}
		select {
		case <-d.done:
			t.Fatalf("BIRD %s exited at start: %v\nlog:\n%s", b.Bird, d.cmd.ProcessState, d.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PID is the process id of the daemon this package started.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Log returns what the daemon wrote on stdout and stderr so far.
func (d *Daemon) Log() string { return d.log.String() }

// Stop ends the daemon with SIGTERM (a clean shutdown), then SIGKILL if it
// is still running 15 s later; both go to the PID Start started. Calling it
// again does nothing.
func (d *Daemon) Stop() error {
	var err error
	d.stop.Do(func() {
		select {
		case <-d.done:
			return
		default:
		}
		if e := d.cmd.Process.Signal(syscall.SIGTERM); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
		}
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
			err = fmt.Errorf("no exit 15 s after SIGTERM, killed")
		}
	})
	return err
}

// Birdc runs the version's birdc against this daemon, e.g.
// Birdc("show", "protocols") or Birdc("-v", "show", "status").
func (d *Daemon) Birdc(args ...string) (string, error) {
	var flags, command []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") && len(command) == 0 {
			flags = append(flags, a)
		} else {
			command = append(command, a)
		}
	}
	argv := append(append(flags, "-s", d.Socket), command...)
	out, err := exec.Command(d.bins.Birdc, argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", d.bins.Birdc, strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// Query sends one command over the control socket, the way an agent reads
// BIRD without birdc, and returns the coded reply, welcome line included.
func (d *Daemon) Query(command string) (string, error) {
	conn, err := net.DialTimeout("unix", d.Socket, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	var reply strings.Builder
	readReply := func() error {
		for {
			line, err := r.ReadString('\n')
			reply.WriteString(line)
			if err != nil {
				return err
			}
			// The last line of a reply is a code followed by a space.
			if len(line) >= 5 && line[4] == ' ' && line[0] >= '0' && line[0] <= '9' {
				return nil
			}
		}
	}
	if err := readReply(); err != nil { // welcome: "0001 BIRD x.y.z ready."
		return reply.String(), err
	}
	if _, err := fmt.Fprintf(conn, "%s\n", command); err != nil {
		return reply.String(), err
	}
	err = readReply()
	return reply.String(), err
}

// Protocols returns the parsed `show protocols`.
func (d *Daemon) Protocols() ([]bird.Protocol, error) {
	out, err := d.Query("show protocols")
	if err != nil {
		return nil, err
	}
	return bird.ParseShowProtocols(out)
}

// Status returns the parsed `show status`.
func (d *Daemon) Status() (bird.Status, error) {
	out, err := d.Query("show status")
	if err != nil {
		return bird.Status{}, err
	}
	return bird.ParseShowStatus(out)
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

// lockedBuffer is a bytes.Buffer safe for the daemon's output goroutines
// and the test reading it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
