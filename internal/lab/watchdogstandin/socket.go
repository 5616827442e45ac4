package watchdogstandin

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"rebound/internal/agent/watchdog"
)

// The lab runs each node's agent as its own process, and the node's
// watchdog outside it, in the lab's process, as a real watchdog is outside
// the agent: an agent killed without a graceful stop leaves the stand-in
// counting, and it resets the node. They talk over a Unix socket, one line
// per call:
//
//	open <W in whole seconds>   ->  ok <W read back>
//	keepalive                   ->  ok
//	disarm                      ->  ok
//
// or `err <reason>` for any of them. A connection that closes without
// `disarm` is the device closed without the magic close.

// Socket serves one node's stand-in watchdog on a Unix socket.
type Socket struct {
	path  string
	clock clock.WithDelayedExecution
	reset func()
	l     net.Listener

	mu     sync.Mutex
	dev    *Device
	resets int
	conns  map[net.Conn]bool
}

// Listen serves the stand-in of one node at path. reset is the lab's reset
// of the node; it runs at most once per opening of the device that is not
// fed for its timeout.
func Listen(path string, c clock.WithDelayedExecution, reset func()) (*Socket, error) {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("watchdog stand-in: listen on %s: %w", path, err)
	}
	s := &Socket{path: path, clock: c, reset: reset, l: l, conns: map[net.Conn]bool{}}
	go s.serve()
	return s, nil
}

// Path is the socket's path, for the agent's --lab-watchdog-socket.
func (s *Socket) Path() string { return s.path }

// Close stops serving; a counting stand-in is disarmed (the lab is done
// with the node).
func (s *Socket) Close() {
	_ = s.l.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
	if s.dev != nil {
		_ = s.dev.Disarm()
	}
}

// Resets counts the resets the stand-in made.
func (s *Socket) Resets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resets
}

// Armed reports whether the stand-in is counting: opened, not disarmed,
// not fired.
func (s *Socket) Armed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dev != nil && s.dev.counting()
}

func (s *Socket) serve() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		go s.handle(c)
	}
}

func (s *Socket) handle(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	in := bufio.NewScanner(c)
	var dev *Device
	for in.Scan() {
		verb, arg, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		var err error
		reply := "ok"
		switch {
		case verb == "open" && dev == nil:
			var secs int
			if secs, err = strconv.Atoi(arg); err == nil && secs <= 0 {
				err = fmt.Errorf("timeout %q: want whole seconds above 0", arg)
			}
			if err == nil {
				dev, err = s.open(time.Duration(secs) * time.Second)
			}
			if err == nil {
				reply = "ok " + strconv.Itoa(secs)
			}
		case verb == "keepalive" && dev != nil:
			err = dev.Keepalive()
		case verb == "disarm" && dev != nil:
			err = dev.Disarm()
		default:
			err = fmt.Errorf("unexpected %q", in.Text())
		}
		if err != nil {
			reply = "err " + err.Error()
		}
		if _, werr := fmt.Fprintln(c, reply); werr != nil {
			return
		}
	}
}

// open opens the device: a new stand-in the first time and after a
// disarm; while one counts (an agent restarted without a graceful stop),
// the same one, still counting, as a real device goes on.
func (s *Socket) open(timeout time.Duration) (*Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dev != nil && s.dev.Fired() {
		return nil, ErrFired
	}
	if s.dev == nil || !s.dev.counting() {
		s.dev = Open(s.clock, timeout, func() {
			s.mu.Lock()
			s.resets++
			s.mu.Unlock()
			s.reset()
		})
	}
	return s.dev, nil
}

// Rearm forgets a stand-in that fired: the node came back from its reset,
// and its next agent opens a fresh device.
func (s *Socket) Rearm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dev != nil && s.dev.Fired() {
		s.dev = nil
	}
}

// Dial returns the agent's side: an open function for the agent's
// fencing options that opens the stand-in served at path.
func Dial(path string) func(timeout time.Duration) (watchdog.Device, error) {
	return func(timeout time.Duration) (watchdog.Device, error) {
		if timeout%time.Second != 0 || timeout <= 0 {
			return nil, fmt.Errorf("watchdog stand-in: timeout %s: want whole seconds", timeout)
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			return nil, fmt.Errorf("watchdog stand-in: %w", err)
		}
		d := &remote{conn: c, in: bufio.NewReader(c)}
		got, err := d.call("open " + strconv.Itoa(int(timeout/time.Second)))
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		secs, err := strconv.Atoi(got)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("watchdog stand-in: open answered %q", got)
		}
		d.timeout = time.Duration(secs) * time.Second
		return d, nil
	}
}

// remote is the agent's handle on a stand-in served by Socket.
type remote struct {
	mu      sync.Mutex
	conn    net.Conn
	in      *bufio.Reader
	timeout time.Duration
}

func (d *remote) call(line string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(d.conn, line); err != nil {
		return "", fmt.Errorf("watchdog stand-in: %s: %w", line, err)
	}
	reply, err := d.in.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("watchdog stand-in: %s: %w", line, err)
	}
	reply = strings.TrimSpace(reply)
	if msg, ok := strings.CutPrefix(reply, "err "); ok {
		return "", errors.New(msg)
	}
	rest, ok := strings.CutPrefix(reply, "ok")
	if !ok {
		return "", fmt.Errorf("watchdog stand-in: %s answered %q", line, reply)
	}
	return strings.TrimSpace(rest), nil
}

func (d *remote) Timeout() time.Duration { return d.timeout }

func (d *remote) Keepalive() error { _, err := d.call("keepalive"); return err }

func (d *remote) Disarm() error {
	_, err := d.call("disarm")
	if cerr := d.conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	return err
}

func (d *remote) Close() error { return d.conn.Close() }
