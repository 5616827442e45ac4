package gossip

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// DefaultHostProbeTimeout is how long a host probe waits for the kubelet
// port's answer. Between nodes of a cluster a SYN is answered in well
// under a millisecond; a second covers a loaded node and stays below the
// kernel's first SYN retransmission, so a silent host costs one second of
// the vote's delay.
const DefaultHostProbeTimeout = time.Second

// HostAnswer is what a host probe found.
type HostAnswer int

const (
	// HostUnknown: the probe failed for a reason that says nothing of the
	// host (this node's own network refused to send): no vote.
	HostUnknown HostAnswer = iota
	// HostAnswers: the connection was accepted, refused or reset: a live
	// kernel at the node's address.
	HostAnswers
	// HostSilent: nothing came back within the timeout, or the host did
	// not answer ARP (EHOSTUNREACH). A local "no route" (ENETUNREACH)
	// is HostUnknown: nothing was sent.
	HostSilent
)

func (a HostAnswer) String() string {
	switch a {
	case HostAnswers:
		return "answers"
	case HostSilent:
		return "silent"
	}
	return "unknown"
}

// HostProber probes a node's host: the kubelet's port at the node's
// address, as the API holds them.
type HostProber interface {
	ProbeHost(ctx context.Context, addr netip.AddrPort) HostAnswer
}

// TCPHostProber dials the host's port. A refused connection is as good
// an answer as an accepted one: only a running kernel sends a RST. It
// sends nothing after the handshake and closes at once.
type TCPHostProber struct {
	// Timeout: zero means DefaultHostProbeTimeout.
	Timeout time.Duration
}

// ProbeHost is HostProber's.
func (p TCPHostProber) ProbeHost(ctx context.Context, addr netip.AddrPort) HostAnswer {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = DefaultHostProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr.String())
	if err == nil {
		_ = c.Close()
		return HostAnswers
	}
	return classifyDial(ctx, err)
}

func classifyDial(ctx context.Context, err error) HostAnswer {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return HostAnswers
	case errors.Is(err, syscall.ENETUNREACH):
		// This node has no route there: nothing was sent, so nothing
		// was learned of the host. A watcher whose own network is gone
		// must not vote Dead on everyone it watches.
		return HostUnknown
	case errors.Is(err, syscall.EHOSTUNREACH):
		// On a LAN the host did not answer ARP (or a router says it is
		// gone): it was asked, and it was silent.
		return HostSilent
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return HostSilent
	case errors.As(err, &ne) && ne.Timeout():
		return HostSilent
	}
	// Canceled (shutdown), EPERM from a local firewall, no buffer space:
	// nothing learned about the host.
	return HostUnknown
}
