// Package smtpcapture runs an in-memory SMTP server for tests, benchmarks and
// `notifyd dev`. It is built on github.com/emersion/go-smtp, listens on a
// loopback address, records every accepted message, and can be told to fail:
// answer a given code at RCPT or at the end of DATA, stall before the final DATA
// reply (a hung server), or go down and come back on the same port.
//
// Recording is cheap: a message is kept as its raw bytes and parsed only when
// Messages or WaitFor is called, and WithDiscard counts messages without keeping
// them, so a 20k-message benchmark spends no time in the sink.
package smtpcapture

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
)

// Domain is the name the server announces in its greeting.
const Domain = "smtpcapture.local"

// TB is the part of testing.TB that Start uses. It is an interface here so that
// non-test binaries (`notifyd dev`) can link this package without the testing
// package.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Option configures a Server.
type Option func(*options)

type options struct {
	discard     bool
	user, pass  string
	startTLS    bool
	implicitTLS bool
	accepted    func(to []string)
}

// WithDiscard makes the server count accepted messages without keeping them:
// Messages returns nil and WaitFor waits on Count only. Use it for benchmarks.
func WithDiscard() Option { return func(o *options) { o.discard = true } }

// WithAccepted calls f with a message's envelope recipients as soon as the
// server has accepted it (before it answers the end of DATA), also in discard
// mode: a benchmark times deliveries with it. f must not block.
func WithAccepted(f func(to []string)) Option { return func(o *options) { o.accepted = f } }

// WithAuth requires SMTP AUTH PLAIN with the given credentials before MAIL.
// Plain-text authentication is allowed on unencrypted connections: this is a
// test server on loopback.
func WithAuth(username, password string) Option {
	return func(o *options) { o.user, o.pass = username, password }
}

// WithSTARTTLS advertises STARTTLS with a self-signed certificate for
// 127.0.0.1 and localhost. Clients trust it through ClientTLSConfig.
func WithSTARTTLS() Option { return func(o *options) { o.startTLS = true } }

// WithImplicitTLS makes the listener speak TLS from the first byte (SMTPS, the
// "tls" mode of notifyd's config) with a self-signed certificate. Clients trust it
// through ClientTLSConfig.
func WithImplicitTLS() Option { return func(o *options) { o.implicitTLS = true } }

// Server is a running SMTP server. Its methods are safe for concurrent use.
type Server struct {
	opts      options
	addr      string
	serverTLS *tls.Config // nil without TLS options
	clientTLS *tls.Config

	mu       sync.Mutex
	srv      *gosmtp.Server
	ln       net.Listener  // closed by us too: go-smtp only knows it once Serve runs
	stop     chan struct{} // closed by Down and Close: aborts hangs
	down     bool
	closed   bool
	msgs     []*received
	count    int
	changed  chan struct{} // closed and replaced whenever count changes
	failData []failure     // FailNext queue, consumed at the end of DATA
	failRcpt []failure     // FailNextRcpt queue, consumed at RCPT
	rcptCode map[string]failure
	hang     time.Duration
	hangNext []time.Duration
	serving  sync.WaitGroup

	conns   atomic.Int64
	hanging atomic.Int64
}

type failure struct {
	code int
	msg  string
}

// New starts a server listening on addr ("127.0.0.1:0" picks a free port; an
// empty addr means the same). Call Close when done.
func New(addr string, opts ...Option) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s := &Server{
		rcptCode: make(map[string]failure),
		changed:  make(chan struct{}),
	}
	for _, o := range opts {
		o(&s.opts)
	}
	if s.opts.startTLS || s.opts.implicitTLS {
		var err error
		if s.serverTLS, s.clientTLS, err = selfSignedTLS(); err != nil {
			return nil, fmt.Errorf("smtpcapture: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("smtpcapture: listen on %s: %w", addr, err)
	}
	// Keep the resolved address: Up re-listens on the same port.
	s.addr = ln.Addr().String()
	s.mu.Lock()
	s.serveLocked(ln)
	s.mu.Unlock()
	return s, nil
}

// Start is New for tests: it fails t when the server cannot start and closes it
// when the test ends. It listens on 127.0.0.1:0.
func Start(t TB, opts ...Option) *Server {
	t.Helper()
	s, err := New("127.0.0.1:0", opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Addr returns the host:port the server listens on. It stays the same across
// Down and Up.
func (s *Server) Addr() string { return s.addr }

// Host returns the host part of Addr.
func (s *Server) Host() string {
	h, _, _ := net.SplitHostPort(s.addr)
	return h
}

// Port returns the port part of Addr.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.addr)
	var n int
	fmt.Sscanf(p, "%d", &n)
	return n
}

// ClientTLSConfig returns a TLS config that trusts the server's self-signed
// certificate, or nil when the server was started without TLS.
func (s *Server) ClientTLSConfig() *tls.Config {
	if s.clientTLS == nil {
		return nil
	}
	return s.clientTLS.Clone()
}

// serveLocked starts a go-smtp server on ln. s.mu must be held.
func (s *Server) serveLocked(ln net.Listener) {
	srv := gosmtp.NewServer(backend{s})
	srv.Domain = Domain
	srv.AllowInsecureAuth = true
	srv.MaxMessageBytes = 64 << 20
	srv.ErrorLog = log.New(io.Discard, "", 0)
	if s.opts.startTLS {
		srv.TLSConfig = s.serverTLS
	}
	var l net.Listener = &countingListener{Listener: ln, n: &s.conns}
	if s.opts.implicitTLS {
		l = tls.NewListener(l, s.serverTLS)
	}
	s.srv = srv
	s.ln = ln
	s.stop = make(chan struct{})
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		_ = srv.Serve(l)
	}()
}

// Close stops the server and closes every connection. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var err error
	if !s.down {
		close(s.stop)
		err = s.srv.Close()
		_ = s.ln.Close()
	}
	s.mu.Unlock()
	s.serving.Wait()
	return err
}

// Down makes the server unreachable: the listener is closed (new connections are
// refused) and open connections are dropped. Up brings it back on the same port.
func (s *Server) Down() {
	s.mu.Lock()
	if s.down || s.closed {
		s.mu.Unlock()
		return
	}
	s.down = true
	close(s.stop)
	_ = s.srv.Close()
	_ = s.ln.Close()
	s.mu.Unlock()
	s.serving.Wait()
}

// Up re-opens the listener on the same address after Down. It returns an error
// when the port was taken in the meantime.
func (s *Server) Up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down || s.closed {
		return nil
	}
	var ln net.Listener
	var err error
	// The port was ours a moment ago; retry briefly in case the kernel is still
	// releasing it.
	for range 50 {
		if ln, err = net.Listen("tcp", s.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("smtpcapture: re-listen on %s: %w", s.addr, err)
	}
	s.down = false
	s.serveLocked(ln)
	return nil
}

// FailNext makes the next n messages fail at the end of DATA with the given SMTP
// code and text (for example 451 "try later", then 550 "rejected"). A failed
// message is not recorded. Calls queue up: FailNext(1, 451, "") then
// FailNext(1, 550, "") fails one message with 451 and the next with 550.
func (s *Server) FailNext(n int, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failData = append(s.failData, failure{code, msg})
	}
}

// FailNextRcpt is FailNext at RCPT TO: the next n recipients are answered with
// code, whatever their address.
func (s *Server) FailNextRcpt(n int, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failRcpt = append(s.failRcpt, failure{code, msg})
	}
}

// FailRecipient makes every RCPT TO for addr (compared case-insensitively) answer
// code. A code of 0 clears it.
func (s *Server) FailRecipient(addr string, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addr = strings.ToLower(addr)
	if code == 0 {
		delete(s.rcptCode, addr)
		return
	}
	s.rcptCode[addr] = failure{code, fmt.Sprintf("mailbox %s unavailable", addr)}
}

// Hang stalls the final reply to every DATA for d, after the message was read (a
// hung server). After the stall the message is accepted as usual unless the
// server went down meanwhile. Hang(0) stops stalling. Down and Close end a stall
// at once.
func (s *Server) Hang(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = d
}

// HangNext stalls only the next n DATA replies for d, like Hang.
func (s *Server) HangNext(n int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.hangNext = append(s.hangNext, d)
	}
}

// Hanging returns how many DATA replies are being stalled right now, so a test
// can wait until a client is stuck.
func (s *Server) Hanging() int { return int(s.hanging.Load()) }

// Connections returns how many TCP connections the server has accepted since it
// started (across Down and Up). A STARTTLS upgrade is not a new connection.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// Count returns how many messages were accepted (also in discard mode).
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Messages returns the accepted messages in the order they were accepted, parsed.
// In discard mode it returns nil.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	msgs := make([]*received, len(s.msgs))
	copy(msgs, s.msgs)
	s.mu.Unlock()
	if s.opts.discard {
		return nil
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.parsed()
	}
	return out
}

// Reset forgets the recorded messages and the message count (failure scripts and
// the connection counter stay).
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = nil
	s.count = 0
}

// WaitFor waits until at least n messages were accepted or timeout passes, then
// returns Messages (nil in discard mode: check Count).
func (s *Server) WaitFor(n int, timeout time.Duration) []Message {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		count, changed := s.count, s.changed
		s.mu.Unlock()
		if count >= n {
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			return s.Messages()
		}
	}
	return s.Messages()
}

func (s *Server) rcptFailure(addr string) (failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.rcptCode[strings.ToLower(addr)]; ok {
		return f, true
	}
	if len(s.failRcpt) > 0 {
		f := s.failRcpt[0]
		s.failRcpt = s.failRcpt[1:]
		return f, true
	}
	return failure{}, false
}

// dataScript returns what to do at the end of DATA: how long to stall first, and
// the failure to answer, if any.
func (s *Server) dataScript() (stall time.Duration, stop <-chan struct{}, f failure, fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stall = s.hang
	if len(s.hangNext) > 0 {
		stall = s.hangNext[0]
		s.hangNext = s.hangNext[1:]
	}
	if len(s.failData) > 0 {
		f, fail = s.failData[0], true
		s.failData = s.failData[1:]
	}
	return stall, s.stop, f, fail
}

func (s *Server) record(m *received) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if !s.opts.discard {
		s.msgs = append(s.msgs, m)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func smtpError(f failure) *gosmtp.SMTPError {
	msg := f.msg
	if msg == "" {
		msg = fmt.Sprintf("scripted failure %d", f.code)
	}
	// A text that starts with an enhanced status code ("5.1.1 no such
	// user") is sent with that code rather than the generic X.0.0.
	enh := gosmtp.EnhancedCodeNotSet
	var e [3]int
	if n, _ := fmt.Sscanf(msg, "%d.%d.%d ", &e[0], &e[1], &e[2]); n == 3 {
		if _, rest, ok := strings.Cut(msg, " "); ok {
			enh, msg = gosmtp.EnhancedCode(e), rest
		}
	}
	return &gosmtp.SMTPError{Code: f.code, EnhancedCode: enh, Message: msg}
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

type backend struct{ s *Server }

func (b backend) NewSession(*gosmtp.Conn) (gosmtp.Session, error) {
	return &session{s: b.s}, nil
}

// session is one client's SMTP conversation.
type session struct {
	s      *Server
	authed bool
	from   string
	to     []string
}

var _ gosmtp.AuthSession = (*session)(nil)

func (ss *session) AuthMechanisms() []string {
	if ss.s.opts.user == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	if ss.s.opts.user == "" || mech != sasl.Plain {
		return nil, gosmtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, username, password string) error {
		if username != ss.s.opts.user || password != ss.s.opts.pass {
			return gosmtp.ErrAuthFailed
		}
		ss.authed = true
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *gosmtp.MailOptions) error {
	if ss.s.opts.user != "" && !ss.authed {
		return gosmtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	if f, ok := ss.s.rcptFailure(to); ok {
		return smtpError(f)
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	var data []byte
	var err error
	if ss.s.opts.discard {
		_, err = io.Copy(io.Discard, r)
	} else {
		data, err = io.ReadAll(r)
	}
	if err != nil {
		return err
	}
	stall, stop, f, fail := ss.s.dataScript()
	if stall > 0 {
		ss.s.hanging.Add(1)
		t := time.NewTimer(stall)
		select {
		case <-t.C:
		case <-stop:
		}
		t.Stop()
		ss.s.hanging.Add(-1)
		select {
		case <-stop:
			// The server went down while stalling: nothing was accepted.
			return &gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "shutting down"}
		default:
		}
	}
	if fail {
		return smtpError(f)
	}
	if ss.s.opts.accepted != nil {
		ss.s.opts.accepted(ss.to)
	}
	if ss.s.opts.discard {
		ss.s.record(nil)
		return nil
	}
	ss.s.record(&received{msg: Message{From: ss.from, To: append([]string(nil), ss.to...), Data: data, Accepted: time.Now()}})
	return nil
}

func (ss *session) Reset() {
	ss.from = ""
	ss.to = nil
}

func (ss *session) Logout() error { return nil }
