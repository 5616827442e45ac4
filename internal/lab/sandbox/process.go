package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane component the sandbox started. The sandbox
// only ever signals processes it started itself, by the PID it recorded.
type process struct {
	Name string `json:"name"`
	Bin  string `json:"bin"`
	PID  int    `json:"pid"`
	Log  string `json:"log"`
	// Args are the flags it was started with, for a restart (restart.go).
	Args []string `json:"args,omitempty"`

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been reaped
	err    error         // set before exited is closed
}

// startProcess runs bin with args, sending its output to logPath.
//
// Attached processes get SIGKILL from the kernel when the process that
// started them dies (PR_SET_PDEATHSIG), so an interrupted test run leaves
// nothing behind. Detached processes (`rebound sandbox up`) run in their own
// session and outlive the CLI until `rebound sandbox down`.
func startProcess(name, bin string, args []string, logPath string, detached bool) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", name, err)
	}
	defer logFile.Close()

	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = componentEnv()
	if detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// Own process group so a terminal's Ctrl-C reaches only the CLI,
		// which then stops the components in order.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	p := &process{Name: name, Bin: bin, PID: cmd.Process.Pid, Log: logPath, Args: args, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// componentEnv strips proxy settings: every component talks to loopback only
// and must never be sent through a proxy that happens to be configured.
func componentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "KUBECONFIG":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// exitedEarly reports whether the process is gone, and how it ended.
func (p *process) exitedEarly() (bool, error) {
	if p.exited == nil {
		return !pidAlive(p.PID, p.Bin), nil
	}
	select {
	case <-p.exited:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and, after grace, SIGKILL. It works both for processes
// this CLI started (cmd set) and for ones recorded in a state file by an
// earlier `sandbox up`; in the latter case it checks that the PID still
// runs the recorded binary before it signals anything.
func (p *process) stop(grace time.Duration) error {
	if p.cmd == nil && !pidAlive(p.PID, p.Bin) {
		return nil
	}
	proc, err := os.FindProcess(p.PID)
	if err != nil {
		return nil
	}
	_ = proc.Signal(syscall.SIGTERM)
	if p.waitGone(grace) {
		return nil
	}
	_ = proc.Signal(syscall.SIGKILL)
	if !p.waitGone(5 * time.Second) {
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.PID)
	}
	return nil
}

func (p *process) waitGone(d time.Duration) bool {
	if p.exited != nil {
		select {
		case <-p.exited:
			return true
		case <-time.After(d):
			return false
		}
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !pidAlive(p.PID, p.Bin) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return !pidAlive(p.PID, p.Bin)
}

// pidAlive reports whether pid exists and runs bin. Checking the executable
// keeps `sandbox down` from signalling an unrelated process that reused a
// PID after a reboot.
func pidAlive(pid int, bin string) bool {
	if pid <= 0 {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		// A zombie has exited; only its parent's wait is missing.
		if _, rest, ok := bytes.Cut(stat, []byte(") ")); ok && len(rest) > 0 && rest[0] == 'Z' {
			return false
		}
	}
	return strings.TrimSuffix(exe, " (deleted)") == bin
}

// waitHealthy polls probe until it succeeds, the process exits, or ctx ends.
// Failures name the component and carry the tail of its log, which is where
// the real reason is.
func (p *process) waitHealthy(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		last = probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		if gone, err := p.exitedEarly(); gone {
			f := p.failure(fmt.Sprintf("exited during start-up (%v)", err))
			f.exited = true
			return f
		}
		select {
		case <-ctx.Done():
			return p.failure(fmt.Sprintf("not healthy after %s: %v", timeout, last))
		case <-tick.C:
		}
	}
}

func (p *process) failure(what string) *ComponentError {
	return &ComponentError{Component: p.Name, What: what, Log: p.Log, LogTail: tailFile(p.Log, 20)}
}

// ComponentError says which component failed to start and shows the end of
// its log.
type ComponentError struct {
	Component string
	What      string
	Log       string
	LogTail   string
	// exited says the component exited during start-up (rather than
	// never turning healthy).
	exited bool
}

func (e *ComponentError) Error() string {
	return fmt.Sprintf("sandbox: %s %s\nlast lines of %s:\n%s", e.Component, e.What, e.Log, indent(e.LogTail))
}

func indent(s string) string {
	if s == "" {
		return "    (empty)"
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = "    " + lines[i]
	}
	return strings.Join(lines, "\n")
}

// tailFile returns the last n lines of path, or "" if it cannot be read.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxTail = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - maxTail
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before the component binds it; start-up then fails with a clear
// "address already in use" in the component's log and the caller retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// memoryKiB reads a process's resident set and its peak (VmRSS, VmHWM) from
// /proc, in KiB. Zero values mean the process is gone.
func memoryKiB(pid int) (rss, peak int64) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		switch key {
		case "VmRSS":
			rss = n
		case "VmHWM":
			peak = n
		}
	}
	return rss, peak
}
