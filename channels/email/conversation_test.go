package email_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
)

// scriptedServer is a minimal SMTP server on 127.0.0.1 that records the
// conversation, which smtptest does not: the tests in this file check which
// commands a send costs. A command is answered with the next reply scripted
// for its verb, else with success.
type scriptedServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	log     []string            // "<connection number> <command line>"; "." is the end of a message's data
	replies map[string][]string // verb -> queued replies; "" drops the connection instead of answering
	conns   []net.Conn
}

func startScripted(t *testing.T) *scriptedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedServer{ln: ln, replies: make(map[string][]string)}
	s.wg.Go(s.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// script queues replies for verb ("MAIL", "RCPT", "DATA", "." for the end of
// the data, "RSET", ...), used one per command before the default one.
func (s *scriptedServer) script(verb string, replies ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies[verb] = append(s.replies[verb], replies...)
}

// commands returns the log reduced to "<connection number> <verb>".
func (s *scriptedServer) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.log))
	for i, l := range s.log {
		n, line, _ := strings.Cut(l, " ")
		verb, _, _ := strings.Cut(line, " ")
		out[i] = n + " " + strings.ToUpper(verb)
	}
	return out
}

// lines returns the logged command lines that start with prefix.
func (s *scriptedServer) lines(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.log {
		if _, line, _ := strings.Cut(l, " "); strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

func (s *scriptedServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		n := len(s.conns)
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(c, n) })
	}
}

// record logs line and returns the reply to it: the scripted one for verb if
// any, else def. ok is false when the connection is to be dropped.
func (s *scriptedServer) record(n int, line, verb, def string) (reply string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, fmt.Sprintf("%d %s", n, line))
	if q := s.replies[verb]; len(q) > 0 {
		s.replies[verb] = q[1:]
		return q[0], q[0] != ""
	}
	return def, true
}

func (s *scriptedServer) serve(c net.Conn, n int) {
	defer c.Close()
	r := bufio.NewReader(c)
	readLine := func() (string, bool) {
		line, err := r.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err == nil
	}
	if _, err := fmt.Fprint(c, "220 scripted.test ESMTP\r\n"); err != nil {
		return
	}
	for {
		line, ok := readLine()
		if !ok {
			return
		}
		verb, _, _ := strings.Cut(line, " ")
		verb = strings.ToUpper(verb)
		def := map[string]string{
			"EHLO": "250-scripted.test\r\n250-PIPELINING\r\n250 8BITMIME",
			"DATA": "354 go ahead",
			"QUIT": "221 bye",
		}[verb]
		if def == "" {
			def = "250 ok"
		}
		reply, ok := s.record(n, line, verb, def)
		if !ok {
			return
		}
		if _, err := fmt.Fprintf(c, "%s\r\n", reply); err != nil || verb == "QUIT" {
			return
		}
		if verb != "DATA" || !strings.HasPrefix(reply, "354") {
			continue
		}
		for {
			if line, ok = readLine(); !ok {
				return
			}
			if line == "." {
				break
			}
		}
		if reply, ok = s.record(n, ".", ".", "250 queued"); !ok {
			return
		}
		if _, err := fmt.Fprintf(c, "%s\r\n", reply); err != nil {
			return
		}
	}
}

func scriptedSender(t *testing.T, srv *scriptedServer, timeout time.Duration) *email.Sender {
	t.Helper()
	s, err := email.New(&email.Config{
		From:    "Acme <notify@acme.test>",
		SMTP:    email.SMTP{Host: "127.0.0.1", Port: srv.ln.Addr().(*net.TCPAddr).Port, TLS: "none"},
		Timeout: config.Duration(timeout),
	}, nil, testNotifiers(), email.Options{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func wantCommands(t *testing.T, srv *scriptedServer, want ...string) {
	t.Helper()
	if got := srv.commands(); !slices.Equal(got, want) {
		t.Errorf("commands:\n got %q\nwant %q", got, want)
	}
}

// transaction is the commands of one message sent on connection n.
func transaction(n int) []string {
	return []string{
		fmt.Sprintf("%d MAIL", n), fmt.Sprintf("%d RCPT", n), fmt.Sprintf("%d DATA", n), fmt.Sprintf("%d .", n),
	}
}

func TestReusedConnectionNeedsNoNoopOrRset(t *testing.T) {
	t.Parallel()
	srv := startScripted(t)
	s := scriptedSender(t, srv, 5*time.Second)
	for i := range 3 {
		r := &channels.Recipient{ID: fmt.Sprint(i), Email: fmt.Sprintf("r%d@example.test", i)}
		if err := s.Send(context.Background(), msg(fmt.Sprintf("d-%d", i), r)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	want := []string{"1 EHLO"}
	for range 3 {
		want = append(want, transaction(1)...)
	}
	wantCommands(t, srv, want...)
	// go-mail's MAIL parameters are kept: the server advertises 8BITMIME.
	if got, want := srv.lines("MAIL"), "MAIL FROM:<notify@acme.test> BODY=8BITMIME"; len(got) != 3 || got[0] != want {
		t.Errorf("MAIL lines = %q, want %q", got, want)
	}
	if got := srv.lines("RCPT"); !slices.Equal(got, []string{"RCPT TO:<r0@example.test>", "RCPT TO:<r1@example.test>", "RCPT TO:<r2@example.test>"}) {
		t.Errorf("RCPT lines = %q", got)
	}
}

func TestRefusedTransactionIsReset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script func(*scriptedServer)
		kind   channels.Kind
		want   []string // the commands of the refused send
		redial bool     // the refused connection was dropped: the next send dials
	}{
		{
			name:   "550 at RCPT",
			script: func(s *scriptedServer) { s.script("RCPT", "550 no such user") },
			kind:   channels.KindPermanent,
			want:   []string{"1 MAIL", "1 RCPT", "1 RSET"},
		},
		{
			name:   "554 at DATA",
			script: func(s *scriptedServer) { s.script("DATA", "554 no valid recipients") },
			kind:   channels.KindPermanent,
			want:   []string{"1 MAIL", "1 RCPT", "1 DATA", "1 RSET"},
		},
		{
			name:   "451 at the end of the data",
			script: func(s *scriptedServer) { s.script(".", "451 try again later") },
			kind:   channels.KindTemporary,
			want:   []string{"1 MAIL", "1 RCPT", "1 DATA", "1 .", "1 RSET"},
		},
		{
			name:   "421 at MAIL",
			script: func(s *scriptedServer) { s.script("MAIL", "421 closing") },
			kind:   channels.KindTemporary,
			want:   []string{"1 MAIL"},
			redial: true,
		},
		{
			name:   "RSET fails",
			script: func(s *scriptedServer) { s.script("RCPT", "450 busy"); s.script("RSET", "") },
			kind:   channels.KindTemporary,
			want:   []string{"1 MAIL", "1 RCPT", "1 RSET"},
			redial: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startScripted(t)
			s := scriptedSender(t, srv, 5*time.Second)
			tt.script(srv)
			err := s.Send(context.Background(), msg("d-refused", ann()))
			if k := kind(t, err); k != tt.kind {
				t.Fatalf("kind = %v, want %v (err: %v)", k, tt.kind, err)
			}
			if err := s.Send(context.Background(), msg("d-next", ann())); err != nil {
				t.Fatalf("next send: %v", err)
			}
			want := append([]string{"1 EHLO"}, tt.want...)
			if tt.redial {
				want = append(want, "2 EHLO")
				want = append(want, transaction(2)...)
			} else {
				want = append(want, transaction(1)...)
			}
			wantCommands(t, srv, want...)
		})
	}
}

// TestDeadConnectionIsRedialledOnlyBeforeData drops a pooled connection at
// each step of the next message. Up to DATA the server has none of it and the
// message goes out on a new connection; once the data was sent the server may
// have it, and the send fails instead of sending it twice.
func TestDeadConnectionIsRedialledOnlyBeforeData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		drop string   // the verb not answered
		want []string // the commands of the second send
	}{
		{"MAIL", append([]string{"1 MAIL", "2 EHLO"}, transaction(2)...)},
		{"RCPT", append([]string{"1 MAIL", "1 RCPT", "2 EHLO"}, transaction(2)...)},
		{"DATA", append([]string{"1 MAIL", "1 RCPT", "1 DATA", "2 EHLO"}, transaction(2)...)},
		{".", transaction(1)},
	}
	for _, tt := range tests {
		t.Run(tt.drop, func(t *testing.T) {
			t.Parallel()
			srv := startScripted(t)
			s := scriptedSender(t, srv, 5*time.Second)
			if err := s.Send(context.Background(), msg("d-1", ann())); err != nil {
				t.Fatal(err)
			}
			srv.script(tt.drop, "")
			err := s.Send(context.Background(), msg("d-2", ann()))
			if tt.drop == "." {
				if k := kind(t, err); k != channels.KindTemporary {
					t.Errorf("kind = %v, want temporary (err: %v)", k, err)
				}
			} else if err != nil {
				t.Errorf("send over a connection that died before DATA: %v", err)
			}
			want := append([]string{"1 EHLO"}, transaction(1)...)
			wantCommands(t, srv, append(want, tt.want...)...)
		})
	}
}

// TestPooledConnectionOutlivesSocketDeadline reuses a connection that sat idle
// for longer than the socket deadline set when it was used last: each send
// sets its own.
func TestPooledConnectionOutlivesSocketDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond // the socket deadline is a second more
	srv := startScripted(t)
	s := scriptedSender(t, srv, timeout)
	for i := range 2 {
		if i > 0 {
			time.Sleep(timeout + 1500*time.Millisecond)
		}
		if err := s.Send(context.Background(), msg(fmt.Sprintf("d-%d", i), ann())); err != nil {
			t.Fatal(err)
		}
	}
	wantCommands(t, srv, append(append([]string{"1 EHLO"}, transaction(1)...), transaction(1)...)...)
}
