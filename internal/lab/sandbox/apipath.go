package sandbox

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"k8s.io/client-go/rest"
)

// APIPath is one client's own way to the apiserver: a TCP forwarder on
// loopback, between the client (a node's agent) and the apiserver, that
// the lab can cut. Cut is a network that drops the client's packets, as a
// failed load balancer or a broken route does: connections already open
// stop carrying bytes either way, new ones are accepted and never
// forwarded, and nothing is refused or reset, so the client learns of it
// only by its own timeouts. Restore closes every connection the cut held
// (the client reconnects, as it would once its old connections time out)
// and forwards again. The kubelets' path is the heartbeat switch
// (StopNode); an APIPath is the path of whatever else runs on the node.
//
// The apiserver's certificate names 127.0.0.1, so a client may reach it
// through any loopback port under the same TLS settings.
type APIPath struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[*pathConn]struct{}
}

// pathConn is one client connection and, unless it was accepted during a
// cut, its connection to the apiserver.
type pathConn struct {
	client, server net.Conn
	// held is closed when the cut catches the connection: from then on its
	// bytes are read and dropped.
	held     chan struct{}
	holdOnce sync.Once
	// stopped is closed once both connections are closed.
	stopped  chan struct{}
	stopOnce sync.Once
}

func (pc *pathConn) hold() { pc.holdOnce.Do(func() { close(pc.held) }) }

func (pc *pathConn) stop() {
	pc.stopOnce.Do(func() {
		pc.client.Close()
		if pc.server != nil {
			pc.server.Close()
		}
		close(pc.stopped)
	})
}

// OpenAPIPath opens a path to c's apiserver on a free loopback port.
func (c *Cluster) OpenAPIPath() (*APIPath, error) {
	u, err := url.Parse(c.APIServerURL)
	if err != nil {
		return nil, fmt.Errorf("sandbox: the apiserver URL %q: %w", c.APIServerURL, err)
	}
	return OpenAPIPath(u.Host)
}

// OpenAPIPath opens a path to target (host:port) on a free loopback port.
func OpenAPIPath(target string) (*APIPath, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sandbox: open an API path: %w", err)
	}
	p := &APIPath{ln: ln, target: target, conns: map[*pathConn]struct{}{}}
	go p.accept()
	return p, nil
}

// URL is the https URL a client on this path uses for the apiserver.
func (p *APIPath) URL() string { return "https://" + p.ln.Addr().String() }

// Config is cfg with its host on this path: a client made from it reaches
// the apiserver only while the path is not cut.
func (p *APIPath) Config(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Host = p.URL()
	return out
}

// Cut drops every byte on the path from now on, of the connections open
// and of those to come, until Restore.
func (p *APIPath) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for pc := range p.conns {
		pc.hold()
	}
}

// Restore ends a cut: the connections it held are closed, new ones are
// forwarded.
func (p *APIPath) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for pc := range p.conns {
		select {
		case <-pc.held:
			pc.stop()
			delete(p.conns, pc)
		default:
		}
	}
}

// IsCut says whether the path is cut.
func (p *APIPath) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close closes the path and every connection on it.
func (p *APIPath) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[*pathConn]struct{}{}
	p.mu.Unlock()
	for pc := range conns {
		pc.stop()
	}
	return p.ln.Close()
}

func (p *APIPath) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(client)
	}
}

func (p *APIPath) serve(client net.Conn) {
	pc := &pathConn{client: client, held: make(chan struct{}), stopped: make(chan struct{})}
	p.mu.Lock()
	cut, closed := p.cut, p.closed
	p.mu.Unlock()
	if closed {
		client.Close()
		return
	}
	if !cut {
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			// The apiserver is down: the client sees what it would see
			// without the path.
			client.Close()
			return
		}
		pc.server = server
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.stop()
		return
	}
	p.conns[pc] = struct{}{}
	if p.cut {
		pc.hold()
	}
	p.mu.Unlock()
	if pc.server == nil {
		// Accepted during the cut: read and drop until Restore or Close.
		drop(client)
		p.forget(pc)
		return
	}
	done := make(chan struct{}, 2)
	go func() { pump(pc, pc.server, pc.client); done <- struct{}{} }()
	go func() { pump(pc, pc.client, pc.server); done <- struct{}{} }()
	<-done
	select {
	case <-pc.held:
		// A held connection stays open whatever its far end did, as a
		// peer behind a dropping network never sees the FIN, until
		// Restore or Close.
		<-pc.stopped
	default:
	}
	pc.stop()
	<-done
	p.forget(pc)
}

func (p *APIPath) forget(pc *pathConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pump copies src to dst until either ends, dropping what it reads once
// the connection is held.
func pump(pc *pathConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-pc.held:
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func drop(c net.Conn) { _, _ = io.Copy(io.Discard, c) }
