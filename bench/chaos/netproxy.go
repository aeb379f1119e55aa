package main

import (
	"net"
	"sync"
	"time"
)

// netProxy stands between the daemons and PostgreSQL: it listens on
// 127.0.0.1 and forwards each connection to the server's Unix socket, and the
// scenario makes the network bad on purpose — a delay on every read, every
// connection reset at once, or a pause in which nothing moves and nothing
// new connects.
type netProxy struct {
	ln     net.Listener
	target string // the server's Unix socket path

	mu      sync.Mutex
	delay   time.Duration
	paused  chan struct{} // closed when not paused; replaced by Pause
	conns   map[net.Conn]struct{}
	resets  int
	accepts int
}

func newNetProxy(target string) (*netProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &netProxy{ln: ln, target: target, paused: open, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *netProxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// SetDelay delays every chunk forwarded in either direction by d.
func (p *netProxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// ResetAll closes every open connection abruptly (a TCP RST to the client).
func (p *netProxy) ResetAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		n++
	}
	p.resets += n
	return n
}

// Pause holds every byte and every new connection until Resume.
func (p *netProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.paused:
		p.paused = make(chan struct{})
	default: // already paused
	}
}

// Resume lets the held bytes and connections through.
func (p *netProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.paused:
	default:
		close(p.paused)
	}
}

// gate returns once the proxy is not paused, and the delay to apply.
func (p *netProxy) gate() time.Duration {
	p.mu.Lock()
	ch, d := p.paused, p.delay
	p.mu.Unlock()
	<-ch
	return d
}

func (p *netProxy) Close() {
	_ = p.ln.Close()
	p.Resume()
	p.ResetAll()
}

func (p *netProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *netProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
		p.accepts++
	} else {
		delete(p.conns, c)
	}
}

func (p *netProxy) handle(client net.Conn) {
	p.gate()
	server, err := net.DialTimeout("unix", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.track(client, true)
	p.track(server, true)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if d := p.gate(); d > 0 {
					time.Sleep(d) // the injected latency itself, not a wait for state
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return // EOF or a reset: the other direction is closed too
			}
		}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
	p.track(client, false)
	p.track(server, false)
}
