package gossip

import (
	"errors"
	"io"
	"log"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestTransportCut: with Config.Cut (the lab's partitions) a member
// neither sends to nor hears from the addresses it names, packets and
// streams alike, and hears them again once the cut heals.
func TestTransportCut(t *testing.T) {
	var cutOn atomic.Bool
	cutOn.Store(true)
	peer := netip.MustParseAddr("127.0.0.2")
	logger := log.New(io.Discard, "", 0)
	a, err := newCountingTransport("127.0.0.1", 0, logger, func(x netip.Addr) bool { return cutOn.Load() && x == peer })
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := newCountingTransport("127.0.0.2", 0, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	aAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(a.port()))
	bAddr := net.JoinHostPort("127.0.0.2", strconv.Itoa(b.port()))

	received := func(tr *countingTransport) bool {
		select {
		case <-tr.PacketCh():
			return true
		case <-time.After(300 * time.Millisecond):
			return false
		}
	}
	if _, err := b.WriteTo([]byte("ping"), aAddr); err != nil {
		t.Fatal(err)
	}
	if received(a) {
		t.Fatal("a heard a packet from the address cut off")
	}
	if _, err := a.WriteTo([]byte("ping"), bAddr); err != nil {
		t.Fatalf("a send over a cut link: %v, want it lost silently", err)
	}
	if received(b) {
		t.Fatal("a packet crossed the cut")
	}
	start := time.Now()
	if _, err := a.DialTimeout(bAddr, 200*time.Millisecond); !errors.Is(err, errCut) || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("dial over the cut: %v after %s, want errCut after the timeout", err, time.Since(start))
	}

	cutOn.Store(false)
	if _, err := b.WriteTo([]byte("ping"), aAddr); err != nil {
		t.Fatal(err)
	}
	if !received(a) {
		t.Fatal("healed, yet a hears nothing from b")
	}
	c, err := a.DialTimeout(bAddr, time.Second)
	if err != nil {
		t.Fatalf("dial after the heal: %v", err)
	}
	c.Close()
}
