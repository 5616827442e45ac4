package gossip

import (
	"fmt"
	"net/netip"
	"testing"

	"rebound/internal/lab/hoststandin"
)

// Host stand-ins are listeners in place of a node's kubelet port, for
// the tests, which run every member in one process: one
// that accepts is a live host; a silenced one drops every SYN, as a host
// that lost power or its network does. They are the lab's
// (hoststandin), addressed as the members' book holds them.

// acceptingHost listens on addr (IPv4 loopback, any free port) and
// accepts and closes every connection, until close.
func acceptingHost(addr netip.Addr) (netip.AddrPort, func(), error) {
	h, err := hoststandin.Listen("stand-in", addr.String())
	if err != nil {
		return netip.AddrPort{}, nil, err
	}
	return netip.AddrPortFrom(addr, uint16(h.Port)), h.Close, nil
}

// loadHosts runs MeasureLoad's two host stand-ins for the test.
func loadHosts(t testing.TB) LoadHosts {
	t.Helper()
	live, closeLive, err := acceptingHost(LoadHostAddrs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLive)
	silent, closeSilent, err := silentHost(LoadHostAddrs[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeSilent)
	return LoadHosts{Live: live, Silent: silent}
}

// silentHost listens on addr (IPv4 loopback, any free port) and drops
// every SYN: a dial there neither completes nor is refused.
func silentHost(addr netip.Addr) (netip.AddrPort, func(), error) {
	h, err := hoststandin.Listen("silent stand-in", addr.String())
	if err != nil {
		return netip.AddrPort{}, nil, err
	}
	if err := h.Silence(); err != nil {
		h.Close()
		return netip.AddrPort{}, nil, fmt.Errorf("silentHost %s: %w", addr, err)
	}
	return netip.AddrPortFrom(addr, uint16(h.Port)), h.Close, nil
}
