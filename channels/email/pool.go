package email

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
)

// maxIdle is how long a pooled connection may sit unused before it is closed
// instead of reused. Servers drop idle clients after a while (RFC 5321 asks for
// at least 5 minutes); staying well below that keeps stale connections rare,
// and a stale one is redialled anyway (see Sender.deliver).
const maxIdle = time.Minute

var errPoolClosed = errors.New("email sender is closed")

// pool holds at most size SMTP connections. A connection is used by one send at
// a time, so a hung server stalls only the sends holding its connections, and
// each of those gives up at its timeout.
type pool struct {
	dial   func(ctx context.Context) (*conn, error)
	now    func() time.Time
	tokens chan struct{} // one per connection in use; cap is the pool size

	mu     sync.Mutex
	idle   []*conn // most recently used last
	closed bool
}

// conn is one SMTP connection. It has its own go-mail Client because a Client
// keeps per-connection authentication state (LOGIN counts its steps).
type conn struct {
	mc         *mail.Client
	sc         *smtp.Client
	raw        net.Conn // the socket under sc (a *tls.Conn for implicit TLS)
	mode       txMode   // how transactions run, from the EHLO reply
	mailParams string   // MAIL's parameters from the EHLO reply (" BODY=8BITMIME")
	lastUsed   time.Time
	reused     bool  // taken from the idle list rather than freshly dialled
	pool       *pool // the pool c goes back to
}

func newPool(size int, dial func(context.Context) (*conn, error), now func() time.Time) *pool {
	return &pool{dial: dial, now: now, tokens: make(chan struct{}, size)}
}

// acquire returns a connection for one send: the most recently used idle one,
// or a new one when none is idle. It waits while size connections are in use.
func (p *pool) acquire(ctx context.Context) (*conn, error) {
	select {
	case p.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for an smtp connection: %w", context.Cause(ctx))
	}
	now := p.now()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.tokens
		return nil, errPoolClosed
	}
	var stale []*conn
	var c *conn
	for len(p.idle) > 0 && c == nil {
		last := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if now.Sub(last.lastUsed) > maxIdle {
			stale = append(stale, last)
			continue
		}
		c = last
	}
	p.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
	if c != nil {
		c.reused = true
		c.pool = p
		return c, nil
	}
	c, err := p.dial(ctx)
	if err != nil {
		<-p.tokens
		return nil, err
	}
	c.pool = p
	return c, nil
}

// release gives c back. A connection that is not healthy (keep false) is
// closed; so is any connection once the pool is closed.
func (p *pool) release(c *conn, keep bool) {
	defer func() { <-p.tokens }()
	if keep {
		c.lastUsed = p.now()
		p.mu.Lock()
		if !p.closed {
			p.idle = append(p.idle, c)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		c.quit()
		return
	}
	c.close()
}

// close closes the idle connections (politely, with QUIT) and makes later
// acquires fail. Connections in use are closed when they are released.
func (p *pool) close() {
	p.mu.Lock()
	idle := slices.Clone(p.idle)
	p.idle = nil
	p.closed = true
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range idle {
		wg.Go(c.quit)
	}
	wg.Wait()
}

// dropIdle closes every idle connection.
func (p *pool) dropIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// close drops the connection without a goodbye: it is broken or in an unknown
// state.
func (c *conn) close() { _ = c.sc.Close() }

// quit says QUIT and closes, waiting at most a couple of seconds for the server.
func (c *conn) quit() {
	_ = c.sc.UpdateDeadline(2 * time.Second)
	if err := c.mc.CloseWithSMTPClient(c.sc); err != nil {
		c.close()
	}
}
