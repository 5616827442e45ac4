// Package birdproc finds the BIRD binaries and runs BIRD daemons for
// tests, benchmarks and the lab (birdlab), without the testing package:
// birdtest wraps it for tests, cmd/rebound-bench uses it directly.
//
// A daemon runs in the foreground (-f), so the process started is the
// daemon itself, and it is stopped by that PID only, never by name. It can
// run inside a network namespace (`ip netns exec NS bird ...`: ip execs
// BIRD in the same process, so the PID is still BIRD's).
package birdproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"rebound/pkg/peering/bird"
)

// Environment and install locations.
const (
	// EnvBird2 is the path of the BIRD 2 daemon; its birdc is beside it.
	EnvBird2 = "REBOUND_BIRD2"
	// DefaultBird2 is where hack/install-bird.sh unpacks BIRD 2.
	DefaultBird2 = "/opt/rebound/bird2/usr/sbin/bird"
	// DefaultBird16 is where Debian's "bird" package puts BIRD 1.6.
	DefaultBird16 = "/usr/sbin/bird"
	// InstallHint tells what to do when a binary is missing.
	InstallHint = "install BIRD 1.6 and BIRD 2 with `sudo hack/install-bird.sh`"
)

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

// Parse runs the daemon's own configuration parser (`bird -p -c FILE`) and
// returns its complaint, if any.
func (b Binaries) Parse(configPath string) error {
	out, err := exec.Command(b.Bird, "-p", "-c", configPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -p -c %s: %v: %s", b.Bird, configPath, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Options change how Start runs the daemon.
type Options struct {
	// Recovery starts BIRD in graceful-restart recovery (`bird -R`), as
	// calico-node does.
	Recovery bool
	// NetNS runs the daemon inside this network namespace (made with
	// `ip netns add`); empty means the caller's.
	NetNS string
	// Socket is the control socket path; required. A unix socket path
	// holds at most 107 bytes.
	Socket string
	// StartTimeout bounds the wait for the socket to answer; 0 means 30 s.
	StartTimeout time.Duration
}

// Daemon is one BIRD process started by Start.
type Daemon struct {
	bins    Binaries
	cmd     *exec.Cmd
	socket  string
	log     lockedBuffer
	done    chan struct{}
	stop    sync.Once
	started time.Time
}

// Start runs BIRD with configPath and waits until its control socket
// answers. On error nothing is left running.
func Start(ctx context.Context, b Binaries, configPath string, opts Options) (*Daemon, error) {
	if opts.Socket == "" {
		return nil, errors.New("birdproc: Options.Socket is required")
	}
	if len(opts.Socket) > 107 {
		return nil, fmt.Errorf("birdproc: socket path %s is %d bytes, a unix socket path holds at most 107", opts.Socket, len(opts.Socket))
	}
	_ = os.Remove(opts.Socket) // a stale socket of a killed daemon
	d := &Daemon{bins: b, socket: opts.Socket, done: make(chan struct{})}
	args := []string{"-f", "-c", configPath, "-s", opts.Socket}
	if opts.Recovery {
		args = append(args, "-R")
	}
	if opts.NetNS != "" {
		d.cmd = exec.Command("ip", append([]string{"netns", "exec", opts.NetNS, b.Bird}, args...)...)
	} else {
		d.cmd = exec.Command(b.Bird, args...)
	}
	d.cmd.Stdout, d.cmd.Stderr = &d.log, &d.log
	// Die with the process that started the daemon, even if it is killed.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", b.Bird, err)
	}
	d.started = time.Now()
	go func() { _ = d.cmd.Wait(); close(d.done) }()

	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	deadline := time.Now().Add(timeout)
	client := d.Client()
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.Query(qctx, "show status")
		cancel()
		if err == nil {
			return d, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = d.Kill()
			return nil, fmt.Errorf("BIRD pid %d: control socket %s did not answer in %s: %v\nlog:\n%s", d.PID(), d.socket, timeout, err, d.Log())
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("BIRD %s exited at start: %v\nlog:\n%s", b.Bird, d.cmd.ProcessState, d.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PID is the process id of the daemon Start started.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Started is when the process was started.
func (d *Daemon) Started() time.Time { return d.started }

// Socket is the control socket path.
func (d *Daemon) Socket() string { return d.socket }

// Client talks to this daemon over its control socket.
func (d *Daemon) Client() bird.Client { return bird.Client{Socket: d.socket} }

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
	argv := append(append(flags, "-s", d.socket), command...)
	out, err := exec.Command(d.bins.Birdc, argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", d.bins.Birdc, strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// Log returns what the daemon wrote on stdout and stderr so far.
func (d *Daemon) Log() string { return d.log.String() }

// Exited reports whether the process has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// Stop ends the daemon with SIGTERM (a clean shutdown), then SIGKILL if it
// is still running 15 s later; both go to the PID Start started. Calling it
// again, or after Kill, does nothing.
func (d *Daemon) Stop() error {
	var err error
	d.stop.Do(func() {
		if d.Exited() {
			return
		}
		if e := d.cmd.Process.Signal(syscall.SIGTERM); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
		}
		_ = d.cmd.Process.Signal(syscall.SIGCONT) // a frozen daemon handles SIGTERM only once it runs
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
			err = fmt.Errorf("no exit 15 s after SIGTERM, killed")
		}
	})
	return err
}

// Kill ends the daemon with SIGKILL, as a node dies: no clean BGP
// shutdown, routes left in the kernel. It waits for the process to end.
func (d *Daemon) Kill() error {
	var err error
	d.stop.Do(func() {
		if d.Exited() {
			return
		}
		if e := d.cmd.Process.Kill(); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
		}
		<-d.done
	})
	return err
}

// Freeze stops the daemon with SIGSTOP, as a node loses power: it sends
// nothing more and closes nothing, so its peers notice only by BFD or the
// BGP hold timer (a SIGKILL on loopback closes its TCP sessions at once).
// Kill or Stop end it later.
func (d *Daemon) Freeze() error {
	if d.Exited() {
		return nil
	}
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// lockedBuffer is a bytes.Buffer safe for the daemon's output goroutines
// and a reader.
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
