// Package hoststandin stands in for a node's kernel as a host probe sees
// it, on loopback: a TCP listener that answers while the host lives and,
// silenced, drops every SYN as a machine that lost power or its network
// does (silent, never refusing). The lab's hosts (scenario.StartHosts),
// the gossip package's tests and rebound-bench's load measurement share it.
package hoststandin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// A Host stands in for a node's kernel as the gossip members probe it: a
// TCP listener at the Node's InternalIP on the port the Node's
// status.daemonEndpoints.kubeletEndpoint names, as a real kubelet's port.
// Alive, it accepts and closes every connection. Silenced, it drops
// packets as a dead or cut-off machine does: nothing is refused (a refusal
// is a live kernel's answer), a dial neither completes nor fails.
//
// The kernel drops a SYN when the listener's accept queue is full. The
// listener has a small backlog (hostBacklog): to silence the host it
// stops accepting and fills the queue with its own dials. Not 0: with no
// room for a half-open connection every SYN goes the SYN-cookie way, and
// the kernel drops some of a live host's.
type Host struct {
	Node    string
	Address string
	Port    int

	l *net.TCPListener

	mu       sync.Mutex
	silenced bool
	fillers  []net.Conn
	paused   chan struct{} // closed by the accept loop once it has paused
	resume   chan struct{}
	closed   bool
	done     chan struct{}
}

// errQueueUnknown: this platform cannot read a listener's accept queue.
var errQueueUnknown = errors.New("the accept queue's length is read on Linux only")

// hostBacklog is the listener's backlog: a few dials of our own fill
// its queue.
const hostBacklog = 8

// hostAcceptTick is how often the accept loop looks whether it must pause.
const hostAcceptTick = 50 * time.Millisecond

// Listen opens node's stand-in at address on a port the kernel
// chooses (free at that address: sandboxes side by side share the nodes'
// loopback addresses and are told apart by the port).
func Listen(node, address string) (*Host, error) {
	ip := net.ParseIP(address).To4()
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("host of %s: %q is not an IPv4 loopback address (the lab listens on loopback only)", node, address)
	}
	// SOCK_CLOEXEC is Linux's; ForkLock keeps a fork from inheriting the
	// descriptor before CloseOnExec (the lab starts processes).
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_TCP)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("host of %s: socket: %w", node, err)
	}
	sa := &syscall.SockaddrInet4{}
	copy(sa.Addr[:], ip)
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("host of %s: bind %s: %w", node, address, err)
	}
	if err := syscall.Listen(fd, hostBacklog); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("host of %s: listen on %s: %w", node, address, err)
	}
	f := os.NewFile(uintptr(fd), "host-"+node)
	fl, err := net.FileListener(f)
	f.Close() // FileListener holds its own copy of the descriptor
	if err != nil {
		return nil, fmt.Errorf("host of %s: %w", node, err)
	}
	l := fl.(*net.TCPListener)
	h := &Host{Node: node, Address: address, Port: l.Addr().(*net.TCPAddr).Port, l: l, done: make(chan struct{})}
	go h.accept()
	return h, nil
}

// Endpoint is the stand-in's address:port.
func (h *Host) Endpoint() string { return net.JoinHostPort(h.Address, strconv.Itoa(h.Port)) }

// accept accepts and closes connections while the host lives, and
// pauses while it is silenced.
func (h *Host) accept() {
	defer close(h.done)
	for {
		h.mu.Lock()
		closed, paused, resume := h.closed, h.paused, h.resume
		if h.silenced && paused != nil {
			h.paused = nil
			close(paused)
		}
		silenced := h.silenced
		h.mu.Unlock()
		if closed {
			return
		}
		if silenced {
			<-resume
			continue
		}
		_ = h.l.SetDeadline(time.Now().Add(hostAcceptTick))
		conn, err := h.l.Accept()
		if err == nil {
			conn.Close()
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Silence makes the host drop every packet sent to its port: it stops
// accepting, then fills the accept queue with its own connections until
// the kernel reports it full and a dial gets no answer.
func (h *Host) Silence() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return fmt.Errorf("host of %s is closed", h.Node)
	}
	if h.silenced {
		h.mu.Unlock()
		return nil
	}
	paused := make(chan struct{})
	h.silenced, h.paused, h.resume = true, paused, make(chan struct{})
	h.mu.Unlock()
	<-paused
	// A Revive or Close while the accept loop was pausing closed paused
	// itself (unpause): then this silencing is over before it began.
	h.mu.Lock()
	over := !h.silenced || h.closed
	h.mu.Unlock()
	if over {
		return fmt.Errorf("silence the host of %s: revived or closed meanwhile", h.Node)
	}
	for range 4 * hostBacklog {
		conn, err := net.DialTimeout("tcp", h.Endpoint(), 300*time.Millisecond)
		if err == nil {
			h.mu.Lock()
			over := !h.silenced || h.closed
			if !over {
				h.fillers = append(h.fillers, conn)
			}
			h.mu.Unlock()
			if over {
				conn.Close()
				return fmt.Errorf("silence the host of %s: revived or closed meanwhile", h.Node)
			}
			continue
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return fmt.Errorf("silence the host of %s: %w", h.Node, err)
		}
		n, err := h.queued()
		if errors.Is(err, errQueueUnknown) {
			return nil // where the queue cannot be read, the timeout says full
		}
		if err != nil || n > hostBacklog {
			return err // full: the kernel drops SYNs
		}
	}
	return fmt.Errorf("silence the host of %s: its accept queue still takes connections after %d dials", h.Node, 4*hostBacklog)
}

// queued is the length of the listener's accept queue (acceptQueueLen).
func (h *Host) queued() (int, error) {
	rc, err := h.l.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		n    int
		qerr error
	)
	if err := rc.Control(func(fd uintptr) { n, qerr = acceptQueueLen(fd) }); err != nil {
		return 0, err
	}
	if qerr != nil {
		return 0, fmt.Errorf("host of %s: %w", h.Node, qerr)
	}
	return n, nil
}

// Revive makes a silenced host answer again. It returns once the
// accept loop has emptied the queue, so that the next SYN is answered.
func (h *Host) Revive() error {
	h.mu.Lock()
	if !h.silenced {
		h.mu.Unlock()
		return nil
	}
	for _, c := range h.fillers {
		c.Close()
	}
	h.fillers = nil
	h.silenced = false
	h.unpause()
	close(h.resume)
	h.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := h.queued()
		if errors.Is(err, errQueueUnknown) {
			return nil // the accept loop runs again: the next SYN is answered
		}
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("revive the host of %s: %d connections still queued", h.Node, n)
		}
		time.Sleep(time.Millisecond) // the accept loop is one wake-up away
	}
}

// unpause releases a Silence still waiting for the accept loop to pause,
// which now never will. Called with mu held.
func (h *Host) unpause() {
	if h.paused != nil {
		close(h.paused)
		h.paused = nil
	}
}

// Silenced says whether the host drops packets now.
func (h *Host) Silenced() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.silenced
}

// Close closes the listener for good.
func (h *Host) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for _, c := range h.fillers {
		c.Close()
	}
	h.fillers = nil
	if h.silenced {
		h.silenced = false
		h.unpause()
		close(h.resume)
	}
	h.mu.Unlock()
	h.l.Close()
	<-h.done
}
