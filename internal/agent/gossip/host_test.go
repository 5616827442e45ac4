package gossip

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestTCPHostProberOnARealNetwork: the host probe on loopback, against a
// listener that accepts, a port that refuses (nothing listens: the kernel
// sends a RST) and a listener whose accept queue is full (the kernel drops
// the SYN: silent, as a dead host is).
func TestTCPHostProberOnARealNetwork(t *testing.T) {
	t.Parallel()
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	accepting, closeAccepting, err := acceptingHost(lo)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAccepting()
	silent, closeSilent, err := silentHost(lo)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSilent()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := ln.Addr().(*net.TCPAddr).AddrPort()
	_ = ln.Close()

	const timeout = 300 * time.Millisecond
	p := TCPHostProber{Timeout: timeout}
	for _, tc := range []struct {
		name string
		addr netip.AddrPort
		want HostAnswer
	}{
		{"accepted: a live host", accepting, HostAnswers},
		{"refused: a live kernel, nothing on the port", refusing, HostAnswers},
		{"silent: SYN dropped", silent, HostSilent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got := p.ProbeHost(context.Background(), tc.addr)
			took := time.Since(start)
			if got != tc.want {
				t.Fatalf("ProbeHost(%s) = %s, want %s", tc.addr, got, tc.want)
			}
			if tc.want == HostSilent && took < timeout {
				t.Errorf("silent after %s, before the timeout %s", took, timeout)
			}
			if tc.want == HostAnswers && took >= timeout {
				t.Errorf("an answer took %s, the whole timeout", took)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := p.ProbeHost(ctx, silent); got != HostUnknown {
		t.Errorf("a probe cut short by shutdown: %s, want unknown (no vote)", got)
	}
}
