package gossip

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// A host stand-in is a listener in place of a node's kubelet port, for
// MeasureLoad and the tests, which run every member in one process: one
// that accepts is a live host; one that drops every SYN is a dead one, as
// a host that lost power or its network is: silent, never refusing.

// acceptingHost listens on addr (any free port) and accepts and closes
// every connection, until close.
func acceptingHost(addr netip.Addr) (netip.AddrPort, func(), error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		return netip.AddrPort{}, nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort(), func() { _ = ln.Close() }, nil
}

// silentHost listens on addr (IPv4, any free port) with a backlog of 0
// and never accepts: once its accept queue holds the one connection it
// fills it with, the kernel drops every further SYN, and a dial there
// neither completes nor is refused. Loopback only.
func silentHost(addr netip.Addr) (netip.AddrPort, func(), error) {
	if !addr.Is4() {
		return netip.AddrPort{}, nil, fmt.Errorf("silentHost %s: IPv4 only", addr)
	}
	// SOCK_CLOEXEC is Linux's; ForkLock keeps a fork from inheriting the
	// descriptor before CloseOnExec, on every Unix rebound is built for.
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return netip.AddrPort{}, nil, err
	}
	closeFd := func() { _ = syscall.Close(fd) }
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: addr.As4()}); err != nil {
		closeFd()
		return netip.AddrPort{}, nil, err
	}
	if err := syscall.Listen(fd, 0); err != nil {
		closeFd()
		return netip.AddrPort{}, nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		closeFd()
		return netip.AddrPort{}, nil, err
	}
	at := netip.AddrPortFrom(addr, uint16(sa.(*syscall.SockaddrInet4).Port))
	var held []net.Conn
	release := func() {
		for _, c := range held {
			_ = c.Close()
		}
		closeFd()
	}
	// Fill the accept queue until a dial goes unanswered.
	for range 8 {
		c, err := net.DialTimeout("tcp", at.String(), 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return at, release, nil
			}
			release()
			return netip.AddrPort{}, nil, fmt.Errorf("silentHost %s: %w", at, err)
		}
		held = append(held, c)
	}
	release()
	return netip.AddrPort{}, nil, fmt.Errorf("silentHost %s: the accept queue never filled", at)
}
