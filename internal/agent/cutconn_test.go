package agent

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestCutPacketConn: the fencing probes obey the lab's link cuts as the
// gossip does: nothing goes to, or is read from, an address cut off.
func TestCutPacketConn(t *testing.T) {
	peer := netip.MustParseAddr("127.0.0.2")
	raw, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := cutPacketConn{PacketConn: raw, cut: func(x netip.Addr) bool { return x == peer }}
	defer a.Close()
	b, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	third, err := net.ListenPacket("udp", "127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()

	if n, err := a.WriteTo([]byte("probe"), b.LocalAddr()); err != nil || n != 5 {
		t.Fatalf("write over a cut link: %d, %v; want it lost silently", n, err)
	}
	_ = b.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, _, err := b.ReadFrom(make([]byte, 16)); err == nil {
		t.Fatal("a probe crossed the cut")
	}
	// From the cut address, then from one that is not: only the second
	// is read.
	if _, err := b.WriteTo([]byte("cut"), a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if _, err := third.WriteTo([]byte("open"), a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	_ = a.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 16)
	n, from, err := a.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "open" || from.String() != third.LocalAddr().String() {
		t.Fatalf("read %q from %v (%v), want only the packet from the open link", buf[:n], from, err)
	}
}
