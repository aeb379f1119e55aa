package email

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
)

// decodeConfig decodes channels.email into cfg, reporting problems through
// s.Problems, and reports whether it decoded cleanly. channels.email.smtp is
// one server (a mapping) or a list of them; a list is decoded entry by entry
// so that a problem names its entry and line ("smtp[1].port").
func decodeConfig(s *channels.Setup, cfg *Config) bool {
	p, sec := s.Problems, s.Section
	// Which shape smtp has, read without reporting anything: the decodes
	// below report the problems once.
	var probe struct {
		SMTP      any `yaml:"smtp"`
		Providers any `yaml:"providers"`
	}
	s.Config.NewProblems().Decode(sec, &probe)
	cfg.SMTPSet = probe.SMTP != nil
	_, cfg.ProvidersSet = probe.Providers.([]any)
	list, isList := probe.SMTP.([]any)
	if !isList {
		return p.Decode(sec, cfg)
	}
	rest, err := sec.With("", map[string]any{"smtp": map[string]any{}})
	if err != nil {
		p.Add(sec, "smtp", "%v", err)
		return false
	}
	ok := p.Decode(rest, cfg)
	var servers struct {
		SMTP []*SMTP `yaml:"smtp"`
	}
	// A scratch list: decoding only smtp would call every other key
	// unknown. Its problems under smtp are moved over; the lines it learnt
	// are shared with the file's.
	scratch := s.Config.NewProblems()
	scratch.Decode(sec, &servers)
	var errs *config.Errors
	if errors.As(scratch.Err(), &errs) {
		prefix := sec.Path() + "."
		for _, e := range errs.Errors {
			if strings.HasPrefix(e.Path, prefix+"smtp[") {
				p.Add(sec, strings.TrimPrefix(e.Path, prefix), "%s", e.Message)
				ok = false
			}
		}
	}
	if len(list) == 0 {
		p.Add(sec, "smtp", "an empty list: want one server, or a list of servers tried in order")
		return false
	}
	for i, sm := range servers.SMTP {
		if sm == nil {
			p.Add(sec, fmt.Sprintf("smtp[%d]", i), "must be a mapping with host and port")
			ok = false
			sm = &SMTP{}
		}
		if i == 0 {
			cfg.SMTP = *sm
		} else {
			cfg.Failover = append(cfg.Failover, *sm)
		}
	}
	return ok
}

// checkServers reports what is wrong with each SMTP server of cfg, at its own
// key ("smtp.host" for one server, "smtp[1].host" in a list), and a server
// listed twice.
func checkServers(p *config.Problems, sec *config.Section, cfg *Config) {
	servers := cfg.Servers()
	seen := map[string]int{}
	for i, sm := range servers {
		key := "smtp."
		if len(servers) > 1 {
			key = fmt.Sprintf("smtp[%d].", i)
		}
		checkSMTP(p, sec, key, sm)
		if sm.Host != "" && sm.Port != 0 {
			if j, dup := seen[sm.Addr()]; dup {
				p.Add(sec, strings.TrimSuffix(key, "."), "%s is listed twice (also smtp[%d])", sm.Addr(), j)
			}
			seen[sm.Addr()] = i
		}
	}
}

// checkSMTP reports what is wrong with one SMTP server, at keys starting
// with key ("smtp.", "providers[0].").
func checkSMTP(p *config.Problems, sec *config.Section, key string, sm SMTP) {
	if sm.Host == "" {
		p.Add(sec, key+"host", "must be set")
	}
	switch port := sm.Port; {
	case port == 0:
		p.Add(sec, key+"port", "must be set")
	case port < 1 || port > 65535:
		p.Add(sec, key+"port", "must be between 1 and 65535, got %d", port)
	}
	switch sm.TLS {
	case "none", "starttls", "tls":
	default:
		p.Add(sec, key+"tls", "unknown tls mode %q (want none, starttls or tls)", sm.TLS)
	}
}

// dialer returns the function that opens one pooled connection to the server
// sm: TCP (and TLS for smtp.tls "tls"), greeting, EHLO, STARTTLS for
// "starttls", AUTH when a username is set. The whole handshake is bounded by
// the caller's context, so a server that accepts the connection and then says
// nothing fails the send at channels.email.timeout like a hung DATA does.
func (s *Sender) dialer(sm SMTP, tlsConfig *tls.Config) (func(context.Context) (*conn, error), error) {
	if sm.Host == "" {
		return nil, errors.New("email: channels.email.smtp.host is empty")
	}
	tc := &tls.Config{ServerName: sm.Host, MinVersion: tls.VersionTLS12} // go-mail's default
	if tlsConfig != nil {
		tc = tlsConfig.Clone()
		if tc.ServerName == "" {
			tc.ServerName = sm.Host
		}
	}
	port := sm.Port
	implicitTLS := false
	tlsOpts := []mail.Option{mail.WithTLSConfig(tc)}
	switch sm.TLS {
	case "", "none":
		tlsOpts = append(tlsOpts, mail.WithTLSPolicy(mail.NoTLS))
		port = cmp.Or(port, 25)
	case "starttls":
		tlsOpts = append(tlsOpts, mail.WithTLSPolicy(mail.TLSMandatory))
		port = cmp.Or(port, 587)
	case "tls":
		// With a custom dial function go-mail does not wrap the connection
		// in TLS itself: dialTCP does. WithSSL only tells it not to try
		// STARTTLS on top.
		tlsOpts = append(tlsOpts, mail.WithSSL())
		implicitTLS = true
		port = cmp.Or(port, 465)
	default:
		return nil, fmt.Errorf("email: unknown channels.email.smtp.tls %q (want none, starttls or tls)", sm.TLS)
	}
	helo, err := os.Hostname()
	if err != nil || helo == "" {
		helo = "localhost"
	}
	addr := net.JoinHostPort(sm.Host, fmt.Sprint(port))

	return func(ctx context.Context) (*conn, error) {
		var raw net.Conn
		var stop func() bool
		dial := func(dctx context.Context, network, address string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(dctx, network, address)
			if err != nil {
				return nil, err
			}
			if implicitTLS {
				tlsConn := tls.Client(c, tc)
				if err := tlsConn.HandshakeContext(dctx); err != nil {
					_ = c.Close()
					return nil, err
				}
				c = tlsConn
			}
			// go-mail reads the greeting and runs EHLO, STARTTLS and AUTH
			// without a context; closing the socket is what stops it when
			// the send's context ends. (dctx is go-mail's own, cancelled
			// when the dial returns: it cannot be used for this.)
			raw = c
			stop = context.AfterFunc(ctx, func() { _ = c.Close() })
			return c, nil
		}
		opts := append([]mail.Option{
			mail.WithPort(port),
			mail.WithDialContextFunc(dial),
			mail.WithTimeout(s.socketTimeout()),
			mail.WithHELO(helo),
		}, tlsOpts...)
		if sm.Username != "" {
			opts = append(opts, mail.WithSMTPAuthCustom(&plainOrLogin{user: sm.Username, pass: sm.Password, host: sm.Host}))
		}
		mc, err := mail.NewClient(sm.Host, opts...)
		if err != nil {
			return nil, fmt.Errorf("configure smtp client: %w", err)
		}
		sc, err := mc.DialToSMTPClientWithContext(ctx)
		if stop != nil && !stop() {
			// The context ended during the handshake and closed the socket.
			if sc != nil {
				_ = sc.Close()
			}
			return nil, fmt.Errorf("connect to smtp server %s: %w", addr, context.Cause(ctx))
		}
		if err != nil {
			if raw != nil {
				_ = raw.Close() // go-mail leaves it open on a failed handshake
			}
			return nil, fmt.Errorf("connect to smtp server %s: %w", addr, err)
		}
		mode, params := sessionMode(sc)
		s.log.Debug("smtp connection opened", "channel", Name, "addr", addr, "mode", mode)
		return &conn{mc: mc, sc: sc, raw: raw, mode: mode, mailParams: params}, nil
	}, nil
}

// socketTimeout is the deadline set on a connection's socket for the handshake
// and again for each send. The send's context enforces channels.email.timeout
// (see deliver); the socket deadline is only a backstop, a second later so that
// the context's clearer error wins the race.
func (s *Sender) socketTimeout() time.Duration { return s.timeout + time.Second }

// plainOrLogin authenticates with PLAIN when the server offers it, else LOGIN.
// Both refuse to send the password over an unencrypted connection unless the
// server is on localhost (go-mail's rule). A value serves one connection: LOGIN
// keeps state between steps.
type plainOrLogin struct {
	user, pass, host string
	inner            smtp.Auth
}

func (a *plainOrLogin) Start(si *smtp.ServerInfo) (string, []byte, error) {
	offers := func(mech string) bool {
		for _, m := range si.Auth {
			if strings.EqualFold(m, mech) {
				return true
			}
		}
		return false
	}
	switch {
	case offers("PLAIN"):
		a.inner = smtp.PlainAuth("", a.user, a.pass, a.host, false)
	case offers("LOGIN"):
		a.inner = smtp.LoginAuth(a.user, a.pass, a.host, false)
	default:
		return "", nil, fmt.Errorf("smtp server offers neither PLAIN nor LOGIN authentication (it offers %q)", strings.Join(si.Auth, " "))
	}
	return a.inner.Start(si)
}

func (a *plainOrLogin) Next(fromServer []byte, more bool) ([]byte, error) {
	return a.inner.Next(fromServer, more)
}
