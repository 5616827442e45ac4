package gossip

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// countingTransport is memberlist's own NetTransport, with every byte it
// sends and receives counted: the gossip plane's cost per agent is a
// number /metrics shows and MeasureLoad measures, not an estimate.
// Packets are the probes and the gossip (UDP); streams are push/pull
// anti-entropy, joins and TCP fallback probes.
type countingTransport struct {
	inner   *memberlist.NetTransport
	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{}
	once    sync.Once
	// cut drops what goes to or comes from an address it names (Config.Cut).
	cut func(netip.Addr) bool
	wg  sync.WaitGroup

	packetsSent, packetsReceived atomic.Uint64 // bytes
	streamSent, streamReceived   atomic.Uint64 // bytes
}

// TrafficStats are a member's gossip bytes so far.
type TrafficStats struct {
	PacketBytesSent, PacketBytesReceived uint64
	StreamBytesSent, StreamBytesReceived uint64
}

// Total is every byte sent and received.
func (s TrafficStats) Total() uint64 {
	return s.PacketBytesSent + s.PacketBytesReceived + s.StreamBytesSent + s.StreamBytesReceived
}

// newCountingTransport binds addr:port (any free port when port is 0,
// the same one for UDP and TCP).
func newCountingTransport(addr string, port int, logger *log.Logger, cut func(netip.Addr) bool) (*countingTransport, error) {
	cfg := &memberlist.NetTransportConfig{BindAddrs: []string{addr}, BindPort: port, Logger: logger}
	var (
		nt  *memberlist.NetTransport
		err error
	)
	// With port 0 the kernel picks the TCP port and UDP must get the same
	// one, which another process may hold: try a few, as memberlist does.
	for range 10 {
		if nt, err = memberlist.NewNetTransport(cfg); err == nil || port != 0 || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	t := &countingTransport{
		inner:   nt,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		stop:    make(chan struct{}),
		cut:     cut,
	}
	t.wg.Add(2)
	go t.forwardPackets()
	go t.forwardStreams()
	return t, nil
}

func (t *countingTransport) forwardPackets() {
	defer t.wg.Done()
	in := t.inner.PacketCh()
	for {
		select {
		case p := <-in:
			if t.isCut(p.From.String()) {
				continue
			}
			t.packetsReceived.Add(uint64(len(p.Buf)))
			select {
			case t.packets <- p:
			case <-t.stop:
				return
			}
		case <-t.stop:
			return
		}
	}
}

func (t *countingTransport) forwardStreams() {
	defer t.wg.Done()
	in := t.inner.StreamCh()
	for {
		select {
		case c := <-in:
			if t.isCut(c.RemoteAddr().String()) {
				_ = c.Close()
				continue
			}
			select {
			case t.streams <- &countingConn{Conn: c, t: t}:
			case <-t.stop:
				_ = c.Close()
				return
			}
		case <-t.stop:
			return
		}
	}
}

// port is the bound port.
func (t *countingTransport) port() int { return t.inner.GetAutoBindPort() }

func (t *countingTransport) stats() TrafficStats {
	return TrafficStats{
		PacketBytesSent: t.packetsSent.Load(), PacketBytesReceived: t.packetsReceived.Load(),
		StreamBytesSent: t.streamSent.Load(), StreamBytesReceived: t.streamReceived.Load(),
	}
}

func (t *countingTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

// isCut reports whether hostport's address is cut off (Config.Cut).
func (t *countingTransport) isCut(hostport string) bool {
	if t.cut == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(hostport)
	return err == nil && t.cut(ap.Addr().Unmap())
}

// errCut is what a dial over a cut link returns, after its timeout.
var errCut = errors.New("gossip: the link is cut")

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.isCut(addr) {
		return time.Now(), nil // sent, and lost on the way
	}
	at, err := t.inner.WriteTo(b, addr)
	if err == nil {
		t.packetsSent.Add(uint64(len(b)))
	}
	return at, err
}

func (t *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.isCut(a.Addr) {
		return time.Now(), nil
	}
	at, err := t.inner.WriteToAddress(b, a)
	if err == nil {
		t.packetsSent.Add(uint64(len(b)))
	}
	return at, err
}

func (t *countingTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.isCut(addr) {
		return nil, t.dialCut(timeout)
	}
	c, err := t.inner.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, t: t}, nil
}

func (t *countingTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.isCut(a.Addr) {
		return nil, t.dialCut(timeout)
	}
	c, err := t.inner.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, t: t}, nil
}

func (t *countingTransport) StreamCh() <-chan net.Conn { return t.streams }

// dialCut waits out a dial over a cut link, as a SYN that is never
// answered does.
func (t *countingTransport) dialCut(timeout time.Duration) error {
	select {
	case <-time.After(timeout):
	case <-t.stop:
	}
	return errCut
}

// Shutdown closes the listeners and waits for the forwarders.
func (t *countingTransport) Shutdown() error {
	err := t.inner.Shutdown()
	t.once.Do(func() { close(t.stop) })
	t.wg.Wait()
	if err != nil {
		return fmt.Errorf("gossip transport shutdown: %w", err)
	}
	return nil
}

// countingConn counts a stream's bytes.
type countingConn struct {
	net.Conn
	t *countingTransport
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.t.streamReceived.Add(uint64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.t.streamSent.Add(uint64(n))
	return n, err
}

var _ memberlist.NodeAwareTransport = (*countingTransport)(nil)
