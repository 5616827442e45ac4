package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rebound/internal/lab/sandbox"
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

// hostBacklog is the listener's backlog: a few dials of our own fill
// its queue.
const hostBacklog = 8

// hostAcceptTick is how often the accept loop looks whether it must pause.
const hostAcceptTick = 50 * time.Millisecond

// ListenHost opens node's stand-in at address on a port the kernel
// chooses (free at that address: sandboxes side by side share the nodes'
// loopback addresses and are told apart by the port).
func ListenHost(node, address string) (*Host, error) {
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
	for range 4 * hostBacklog {
		conn, err := net.DialTimeout("tcp", h.Endpoint(), 300*time.Millisecond)
		if err == nil {
			h.mu.Lock()
			h.fillers = append(h.fillers, conn)
			h.mu.Unlock()
			continue
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return fmt.Errorf("silence the host of %s: %w", h.Node, err)
		}
		if n, err := h.queued(); err != nil || n > hostBacklog {
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
	close(h.resume)
	h.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := h.queued()
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("revive the host of %s: %d connections still queued", h.Node, n)
		}
		time.Sleep(time.Millisecond) // the accept loop is one wake-up away
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
		close(h.resume)
	}
	h.mu.Unlock()
	h.l.Close()
	<-h.done
}

// StartHosts opens a stand-in for each of nodes (sandbox node names) at
// its InternalIP and writes its port into the Node's
// status.daemonEndpoints.kubeletEndpoint.Port, where the gossip members
// read it. kwok's stages never write daemonEndpoints, so the port stays.
func StartHosts(ctx context.Context, c *sandbox.Cluster, nodes []string) (map[string]*Host, error) {
	hosts := map[string]*Host{}
	closeAll := func() {
		for _, h := range hosts {
			h.Close()
		}
	}
	for _, n := range nodes {
		i := nodeIndex(c, n)
		if i < 0 {
			closeAll()
			return nil, fmt.Errorf("hosts: no node %q in the sandbox (nodes are %v)", n, c.NodeNames)
		}
		h, err := ListenHost(n, sandbox.NodeAddress(i))
		if err != nil {
			closeAll()
			return nil, err
		}
		hosts[n] = h
		patch := fmt.Appendf(nil, `{"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":%d}}}}`, h.Port)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			closeAll()
			return nil, fmt.Errorf("hosts: write %s's kubelet port: %w", n, err)
		}
	}
	return hosts, nil
}

func nodeIndex(c *sandbox.Cluster, node string) int {
	for i, n := range c.NodeNames {
		if n == node {
			return i
		}
	}
	return -1
}
