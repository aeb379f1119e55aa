package email_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
)

// scriptedServer is a minimal SMTP server on 127.0.0.1 that records the
// conversation, which smtpcapture does not: the tests in this file check which
// commands a send costs, and which bytes arrive in one read. A command is
// answered with the next reply scripted for its verb, else with success. Like
// a real server it answers DATA and BDAT with 503 without a MAIL and 554
// without an accepted RCPT, and reads a BDAT chunk even when it refuses it.
type scriptedServer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	ehlo string // the EHLO reply

	mu       sync.Mutex
	log      []string            // "<connection number> <command line>"; "." is the end of a message's data
	replies  map[string][]string // verb -> queued replies; "" drops the connection instead of answering
	conns    []net.Conn
	done     []chan struct{} // per connection, closed once the server closed it
	reads    [][]string      // per connection, the bytes of each read from the socket
	messages []string        // the data of each message accepted, as received
}

// thenClose at the end of a scripted reply closes the connection after it.
const thenClose = "\x00close"

// noReply as a scripted reply never answers: the server reads until the
// client closes the connection.
const noReply = "\x00hang"

// startScripted starts a server that offers 8BITMIME only: transactions are
// sequential.
func startScripted(t *testing.T) *scriptedServer { return startScriptedEHLO(t, "8BITMIME") }

// startScriptedEHLO starts a server whose EHLO reply offers keywords.
func startScriptedEHLO(t *testing.T, keywords ...string) *scriptedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ehlo := "250-scripted.test"
	if len(keywords) == 0 {
		ehlo = "250 scripted.test"
	}
	for i, k := range keywords {
		sep := "-"
		if i == len(keywords)-1 {
			sep = " "
		}
		ehlo += "\r\n250" + sep + k
	}
	s := &scriptedServer{ln: ln, ehlo: ehlo, replies: make(map[string][]string)}
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

// readsOf returns the bytes of each read on connection n.
func (s *scriptedServer) readsOf(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reads[n-1])
}

// received returns the data of each message the server accepted, in order.
func (s *scriptedServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages)
}

// closed is closed once the server has closed connection n.
func (s *scriptedServer) closed(n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[n-1]
}

func (s *scriptedServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.done = append(s.done, make(chan struct{}))
		s.reads = append(s.reads, nil)
		n := len(s.conns)
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(c, n) })
	}
}

// recordingConn logs the bytes of each read.
type recordingConn struct {
	net.Conn
	s *scriptedServer
	n int
}

func (c recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.s.mu.Lock()
		c.s.reads[c.n-1] = append(c.s.reads[c.n-1], string(p[:n]))
		c.s.mu.Unlock()
	}
	return n, err
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
	defer func() {
		_ = c.Close()
		s.mu.Lock()
		close(s.done[n-1])
		s.mu.Unlock()
	}()
	r := bufio.NewReaderSize(recordingConn{c, s, n}, 64<<10)
	readLine := func() (string, bool) {
		line, err := r.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err == nil
	}
	// reply sends reply and reports whether to go on.
	reply := func(reply string) bool {
		if reply == noReply {
			_, _ = io.Copy(io.Discard, r)
			return false
		}
		reply, closeAfter := strings.CutSuffix(reply, thenClose)
		_, err := fmt.Fprintf(c, "%s\r\n", reply)
		return err == nil && !closeAfter
	}
	if _, err := fmt.Fprint(c, "220 scripted.test ESMTP\r\n"); err != nil {
		return
	}
	mail, rcpts := false, 0 // the transaction's accepted MAIL and RCPTs
	var chunks strings.Builder
	noTransaction := func() string {
		if !mail {
			return "503 5.5.1 MAIL first"
		}
		return "554 5.5.1 no valid recipients"
	}
	for {
		line, ok := readLine()
		if !ok {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		verb = strings.ToUpper(verb)
		def := map[string]string{
			"EHLO": s.ehlo,
			"DATA": "354 go ahead",
			"QUIT": "221 bye",
			"BDAT": "250 queued",
		}[verb]
		if def == "" {
			def = "250 ok"
		}
		if (verb == "DATA" || verb == "BDAT") && (!mail || rcpts == 0) {
			def = noTransaction()
		}
		var chunk []byte
		if verb == "BDAT" {
			// The chunk follows the command, whatever the reply.
			size, _, _ := strings.Cut(arg, " ")
			nb, err := strconv.Atoi(size)
			if err != nil {
				return
			}
			chunk = make([]byte, nb)
			if _, err := io.ReadFull(r, chunk); err != nil {
				return
			}
		}
		rep, ok := s.record(n, line, verb, def)
		if !ok {
			return
		}
		accepted := strings.HasPrefix(rep, "2")
		switch verb {
		case "MAIL":
			mail = accepted
		case "RCPT":
			if accepted {
				rcpts++
			}
		case "RSET":
			mail, rcpts = false, 0
			chunks.Reset()
		case "BDAT":
			if accepted {
				chunks.Write(chunk)
			}
			if strings.HasSuffix(strings.ToUpper(arg), " LAST") || !accepted {
				if accepted {
					s.mu.Lock()
					s.messages = append(s.messages, chunks.String())
					s.mu.Unlock()
				}
				mail, rcpts = false, 0
				chunks.Reset()
			}
		}
		if !reply(rep) || verb == "QUIT" {
			return
		}
		if verb != "DATA" || !strings.HasPrefix(rep, "354") {
			continue
		}
		var data strings.Builder
		for {
			if line, ok = readLine(); !ok {
				return
			}
			if line == "." {
				break
			}
			data.WriteString(strings.TrimPrefix(line, ".") + "\r\n")
		}
		if rep, ok = s.record(n, ".", ".", "250 queued"); !ok {
			return
		}
		if strings.HasPrefix(rep, "2") {
			s.mu.Lock()
			s.messages = append(s.messages, data.String())
			s.mu.Unlock()
		}
		mail, rcpts = false, 0
		if !reply(rep) {
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
			// Not synchronisation: what is under test is the passing of
			// time. The socket deadline of the first send (timeout plus a
			// second) must have passed in real time, as the kernel keeps it.
			time.Sleep(timeout + 1500*time.Millisecond)
		}
		if err := s.Send(context.Background(), msg(fmt.Sprintf("d-%d", i), ann())); err != nil {
			t.Fatal(err)
		}
	}
	wantCommands(t, srv, append(append([]string{"1 EHLO"}, transaction(1)...), transaction(1)...)...)
}

// txModes are the three ways a transaction runs, by what the server offers.
var txModes = []struct {
	name     string
	keywords []string
	data     []string // the verbs that carry the message
}{
	{"sequential", []string{"8BITMIME"}, []string{"DATA", "."}},
	{"pipelining", []string{"PIPELINING", "8BITMIME"}, []string{"DATA", "."}},
	{"chunking", []string{"PIPELINING", "8BITMIME", "CHUNKING"}, []string{"BDAT"}},
}

// on prefixes each verb with connection n: on(1, "MAIL") is "1 MAIL".
func on(n int, verbs ...string) []string {
	out := make([]string, len(verbs))
	for i, v := range verbs {
		out[i] = fmt.Sprintf("%d %s", n, v)
	}
	return out
}

// modeSender is scriptedSender with a fixed clock and, with a key file, DKIM.
func modeSender(t *testing.T, srv *scriptedServer, dkimKey string) *email.Sender {
	t.Helper()
	cfg := &email.Config{
		From:    "Acme <notify@acme.test>",
		SMTP:    email.SMTP{Host: "127.0.0.1", Port: srv.ln.Addr().(*net.TCPAddr).Port, TLS: "none"},
		Timeout: config.Duration(5 * time.Second),
	}
	if dkimKey != "" {
		cfg.DKIM = &email.DKIM{Domain: "acme.test", Selector: "s2026", PrivateKeyFile: dkimKey}
	}
	s, err := email.New(cfg, nil, testNotifiers(), email.Options{PoolSize: 1, Clock: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dotted is a text-only message (no random MIME boundary) with lines that
// start with dots, which DATA stuffs and BDAT sends as they are.
func dotted(id string) channels.Message {
	m := msg(id, ann())
	m.Notifier, m.Params = "text.only", map[string]any{"n": "x\n.one dot\n..two dots\n."}
	return m
}

// withoutDKIM returns message m without its leading DKIM-Signature field.
func withoutDKIM(t *testing.T, m string) string {
	t.Helper()
	if !strings.HasPrefix(m, "DKIM-Signature:") {
		t.Fatalf("message is not signed: %.80q", m)
	}
	rest := m
	for {
		_, after, ok := strings.Cut(rest, "\r\n")
		if !ok {
			t.Fatalf("no end to the DKIM-Signature field")
		}
		rest = after
		if !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "\t") {
			return rest
		}
	}
}

// TestTransactionModes sends two messages in each mode: the commands of
// each transaction, what arrives in one read (one write of the client), and
// the pooled connection's reuse follow what the server offers; the message
// the server stores is the same bytes in every mode, signed or not.
func TestTransactionModes(t *testing.T) {
	t.Parallel()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writeKey(t, key)
	signer, err := email.LoadDKIMKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	record, err := email.DKIMRecord(signer)
	if err != nil {
		t.Fatal(err)
	}
	const mailLine, rcptLine = "MAIL FROM:<notify@acme.test> BODY=8BITMIME\r\n", "RCPT TO:<ann@example.test>\r\n"
	for _, signed := range []bool{false, true} {
		var first []string // the messages the sequential server received
		for _, mode := range txModes {
			t.Run(fmt.Sprintf("%s/signed=%v", mode.name, signed), func(t *testing.T) {
				srv := startScriptedEHLO(t, mode.keywords...)
				path := ""
				if signed {
					path = keyFile
				}
				s := modeSender(t, srv, path)
				for _, id := range []string{"d-1", "d-2"} {
					if err := s.Send(context.Background(), dotted(id)); err != nil {
						t.Fatalf("send %s: %v", id, err)
					}
				}
				tx := append(on(1, "MAIL", "RCPT"), on(1, mode.data...)...)
				wantCommands(t, srv, slices.Concat(on(1, "EHLO"), tx, tx)...)

				got := srv.received()
				if len(got) != 2 {
					t.Fatalf("received %d messages, want 2", len(got))
				}
				var batches []string // the reads that start a transaction
				for _, r := range srv.readsOf(1) {
					if strings.HasPrefix(r, "MAIL") {
						batches = append(batches, r)
					}
				}
				if len(batches) != 2 {
					t.Fatalf("reads = %q, want two starting with MAIL", srv.readsOf(1))
				}
				for i, b := range batches {
					var want string
					switch mode.name {
					case "sequential":
						want = mailLine
					case "pipelining":
						want = mailLine + rcptLine + "DATA\r\n"
					case "chunking":
						want = mailLine + rcptLine + fmt.Sprintf("BDAT %d LAST\r\n", len(got[i])) + got[i]
					}
					if b != want {
						t.Errorf("message %d: one read got\n%q\nwant\n%q", i, b, want)
					}
				}
				if !strings.Contains(got[0], "\r\n.one dot\r\n..two dots\r\n.\r\n") {
					t.Errorf("the dotted lines did not arrive as they were: %q", got[0])
				}
				if signed {
					opts := &dkim.VerifyOptions{LookupTXT: func(string) ([]string, error) { return []string{record}, nil }}
					for i, m := range got {
						vs, err := dkim.VerifyWithOptions(strings.NewReader(m), opts)
						if err != nil || len(vs) != 1 || vs[0].Err != nil {
							t.Errorf("message %d: the signature does not verify: %v %+v", i, err, vs)
						}
						// The signature has a timestamp: the rest is compared.
						got[i] = withoutDKIM(t, m)
					}
				}
				if mode.name == "sequential" {
					first = got
				} else if !slices.Equal(got, first) {
					t.Errorf("the messages differ from the sequential mode's:\n%q\n%q", got, first)
				}
			})
		}
	}
}

// TestPipelinedRefusals checks that a refusal in a pipelined transaction is
// reported as the sequential transaction reports it (the first refusal, with
// its code and mailbox) and leaves the connection as it does: RSET and reuse
// after a refusal, a new connection after 421 or a 354 to a transaction with
// a refused RCPT.
func TestPipelinedRefusals(t *testing.T) {
	t.Parallel()
	type want struct {
		kind     channels.Kind
		suppress bool       // channels.Suppress for ann@example.test
		commands [][]string // of the refused send, by mode: pipelining, chunking
		redial   bool       // the refused connection was dropped
	}
	tests := []struct {
		name   string
		script func(s *scriptedServer, dataVerb string)
		want   want
	}{
		{
			name:   "550 5.1.1 at RCPT",
			script: func(s *scriptedServer, _ string) { s.script("RCPT", "550 5.1.1 no such user") },
			want: want{kind: channels.KindPermanent, suppress: true, commands: [][]string{
				{"MAIL", "RCPT", "DATA", "RSET"}, {"MAIL", "RCPT", "BDAT", "RSET"}}},
		},
		{
			name:   "550 at MAIL",
			script: func(s *scriptedServer, _ string) { s.script("MAIL", "550 5.7.1 sender refused") },
			want: want{kind: channels.KindPermanent, commands: [][]string{
				{"MAIL", "RCPT", "DATA", "RSET"}, {"MAIL", "RCPT", "BDAT", "RSET"}}},
		},
		{
			name:   "452 at RCPT",
			script: func(s *scriptedServer, _ string) { s.script("RCPT", "452 4.5.3 too many recipients") },
			want: want{kind: channels.KindTemporary, commands: [][]string{
				{"MAIL", "RCPT", "DATA", "RSET"}, {"MAIL", "RCPT", "BDAT", "RSET"}}},
		},
		{
			name:   "421 at MAIL",
			script: func(s *scriptedServer, _ string) { s.script("MAIL", "421 4.3.2 shutting down"+thenClose) },
			want:   want{kind: channels.KindTemporary, commands: [][]string{{"MAIL"}, {"MAIL"}}, redial: true},
		},
		{
			name: "5.1.10 refusal of the message",
			script: func(s *scriptedServer, dataVerb string) {
				s.script(dataVerb, "550 5.1.10 recipient address has null MX")
			},
			want: want{kind: channels.KindPermanent, suppress: true, commands: [][]string{
				{"MAIL", "RCPT", "DATA", ".", "RSET"}, {"MAIL", "RCPT", "BDAT", "RSET"}}},
		},
		{
			// A server that takes DATA although it refused the recipient:
			// after its 354 the connection is dropped, nothing is sent.
			name: "354 after a refused RCPT",
			script: func(s *scriptedServer, dataVerb string) {
				s.script("RCPT", "550 5.1.1 no such user")
				if dataVerb == "." {
					s.script("DATA", "354 go ahead")
				} else {
					s.script("BDAT", "250 queued")
				}
			},
			want: want{kind: channels.KindPermanent, suppress: true, commands: [][]string{
				{"MAIL", "RCPT", "DATA"}, {"MAIL", "RCPT", "BDAT"}}, redial: true},
		},
	}
	for _, tt := range tests {
		for i, mode := range txModes[1:] {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				srv := startScriptedEHLO(t, mode.keywords...)
				s := modeSender(t, srv, "")
				tt.script(srv, mode.data[len(mode.data)-1])
				err := s.Send(context.Background(), msg("d-refused", ann()))
				if k := kind(t, err); k != tt.want.kind {
					t.Fatalf("kind = %v, want %v (err: %v)", k, tt.want.kind, err)
				}
				se, ok := channels.SuppressionOf(err)
				if ok != tt.want.suppress || ok && se.Address != "ann@example.test" {
					t.Errorf("suppression = %+v (%v), want %v for ann@example.test (err: %v)", se, ok, tt.want.suppress, err)
				}
				if err := s.Send(context.Background(), msg("d-next", ann())); err != nil {
					t.Fatalf("next send: %v", err)
				}
				want := slices.Concat(on(1, "EHLO"), on(1, tt.want.commands[i]...))
				next := 1
				if tt.want.redial {
					next = 2
					want = append(want, on(2, "EHLO")...)
				}
				want = slices.Concat(want, on(next, "MAIL", "RCPT"), on(next, mode.data...))
				wantCommands(t, srv, want...)
				if tt.name == "354 after a refused RCPT" && mode.name == "pipelining" && len(srv.received()) != 1 {
					t.Errorf("received %d messages, want only the next one", len(srv.received()))
				}
			})
		}
	}
}

// TestPipelinedDeadConnection: a pooled connection the server closed while
// it was idle (with or without a 421) is noticed before BDAT sends the
// message, and the message goes out on a new connection; a connection that
// drops once BDAT's bytes were written is not retried on another, since the
// server may have the message. With PIPELINING only, nothing of the message
// leaves before the 354, and a drop before it is redialled as in sequence.
func TestPipelinedDeadConnection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mode   int    // index in txModes
		first  string // the first send's last reply, closing the connection after it ("": as usual)
		drop   string // the verb of the second send not answered ("": none)
		failed bool   // the second send fails
		want   []string
	}{
		{
			name: "closed while idle", mode: 2, first: "250 queued" + thenClose,
			want: slices.Concat(on(2, "EHLO", "MAIL", "RCPT", "BDAT")),
		},
		{
			name: "421 while idle", mode: 2, first: "250 queued\r\n421 4.4.2 idle for too long" + thenClose,
			want: slices.Concat(on(2, "EHLO", "MAIL", "RCPT", "BDAT")),
		},
		{
			name: "dropped after BDAT was written", mode: 2, drop: "MAIL", failed: true,
			want: on(1, "MAIL"),
		},
		{
			name: "dropped before the data with PIPELINING", mode: 1, drop: "DATA",
			want: slices.Concat(on(1, "MAIL", "RCPT", "DATA"), on(2, "EHLO", "MAIL", "RCPT", "DATA", ".")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mode := txModes[tt.mode]
			srv := startScriptedEHLO(t, mode.keywords...)
			s := modeSender(t, srv, "")
			if tt.first != "" {
				srv.script(mode.data[len(mode.data)-1], tt.first)
			}
			if err := s.Send(context.Background(), msg("d-1", ann())); err != nil {
				t.Fatal(err)
			}
			if tt.first != "" {
				select {
				case <-srv.closed(1):
				case <-time.After(5 * time.Second):
					t.Fatal("the server did not close the connection")
				}
			}
			if tt.drop != "" {
				srv.script(tt.drop, "")
			}
			err := s.Send(context.Background(), msg("d-2", ann()))
			if tt.failed {
				if k := kind(t, err); k != channels.KindTemporary {
					t.Errorf("kind = %v, want temporary (err: %v)", k, err)
				}
			} else if err != nil {
				t.Errorf("send: %v", err)
			}
			tx := slices.Concat(on(1, "MAIL", "RCPT"), on(1, mode.data...))
			wantCommands(t, srv, slices.Concat(on(1, "EHLO"), tx, tt.want)...)
		})
	}
}

// TestSeveralRecipientsNeverUseBDAT: BDAT LAST would deliver to the accepted
// recipients even when one was refused, so a transaction with several takes
// the PIPELINING path with DATA, and a refused RCPT answered with 354 drops
// the connection: the refusal is reported and nothing is sent, as when the
// transaction stops at the refused RCPT.
func TestSeveralRecipientsNeverUseBDAT(t *testing.T) {
	t.Parallel()
	const body = "Subject: hi\r\n\r\nhello\r\n"
	rcpts := []string{"<ann@example.test>", "<bob@example.test>"}
	for _, tt := range []struct {
		name   string
		refuse []string // RCPT replies
		err    string   // the suppressed address ("": sent)
		want   []string // the commands after EHLO
	}{
		{name: "all accepted", want: on(1, "MAIL", "RCPT", "RCPT", "DATA", ".")},
		{name: "second refused", refuse: []string{"250 ok", "550 5.1.1 no such user"}, err: "bob@example.test",
			want: slices.Concat(on(1, "MAIL", "RCPT", "RCPT", "DATA"), on(2, "EHLO", "MAIL", "RCPT", "RCPT", "DATA", "."))},
		{name: "first refused", refuse: []string{"550 5.1.1 no such user"}, err: "ann@example.test",
			want: slices.Concat(on(1, "MAIL", "RCPT", "RCPT", "DATA"), on(2, "EHLO", "MAIL", "RCPT", "RCPT", "DATA", "."))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startScriptedEHLO(t, txModes[2].keywords...)
			s := modeSender(t, srv, "")
			srv.script("RCPT", tt.refuse...)
			err := s.DeliverRaw(context.Background(), "<notify@acme.test>", rcpts, []byte(body))
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				se, ok := channels.SuppressionOf(err)
				if !ok || se.Address != tt.err {
					t.Fatalf("err = %v, want a suppression of %s", err, tt.err)
				}
				if got := srv.received(); len(got) != 0 {
					t.Fatalf("received %q, want nothing", got)
				}
				// The next message goes out on a new connection.
				if err := s.DeliverRaw(context.Background(), "<notify@acme.test>", rcpts, []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			wantCommands(t, srv, slices.Concat(on(1, "EHLO"), tt.want)...)
			want := "MAIL FROM:<notify@acme.test> BODY=8BITMIME\r\nRCPT TO:<ann@example.test>\r\nRCPT TO:<bob@example.test>\r\nDATA\r\n"
			if r := srv.readsOf(1); len(r) < 2 || r[1] != want {
				t.Errorf("reads = %q, want the second to be %q", r, want)
			}
			if got := srv.received(); len(got) != 1 || got[0] != body {
				t.Errorf("received %q, want %q", got, body)
			}
		})
	}
}

// TestPipelinedMailParameters: a pipelined MAIL carries the parameters
// go-mail's own MAIL (the sequential path) adds from the same EHLO reply.
func TestPipelinedMailParameters(t *testing.T) {
	t.Parallel()
	var lines []string
	for _, keywords := range [][]string{
		{"8BITMIME", "SMTPUTF8"},
		{"PIPELINING", "8BITMIME", "SMTPUTF8"},
		{"PIPELINING", "8BITMIME", "SMTPUTF8", "CHUNKING"},
		{"PIPELINING", "CHUNKING"},
	} {
		srv := startScriptedEHLO(t, keywords...)
		if err := modeSender(t, srv, "").Send(context.Background(), msg("d-1", ann())); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, srv.lines("MAIL")...)
	}
	const full = "MAIL FROM:<notify@acme.test> BODY=8BITMIME SMTPUTF8"
	if want := []string{full, full, full, "MAIL FROM:<notify@acme.test>"}; !slices.Equal(lines, want) {
		t.Errorf("MAIL lines:\n got %q\nwant %q", lines, want)
	}
}

// TestHungPipelinedSendTimesOut: a server that never answers the end of a
// pipelined transaction fails the send as temporary at channels.email.timeout
// (the socket is closed under the read), and the next message gets a new
// connection.
func TestHungPipelinedSendTimesOut(t *testing.T) {
	t.Parallel()
	for _, mode := range txModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			srv := startScriptedEHLO(t, mode.keywords...)
			s, err := email.New(&email.Config{
				From:    "Acme <notify@acme.test>",
				SMTP:    email.SMTP{Host: "127.0.0.1", Port: srv.ln.Addr().(*net.TCPAddr).Port, TLS: "none"},
				Timeout: config.Duration(300 * time.Millisecond),
			}, nil, testNotifiers(), email.Options{PoolSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			srv.script(mode.data[len(mode.data)-1], noReply)
			start := time.Now()
			err = s.Send(context.Background(), msg("d-1", ann()))
			if k := kind(t, err); k != channels.KindTemporary || !strings.Contains(err.Error(), "timed out") {
				t.Fatalf("kind = %v, want a temporary timeout (err: %v)", k, err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the send took %v", d)
			}
			if err := s.Send(context.Background(), msg("d-2", ann())); err != nil {
				t.Fatalf("next send: %v", err)
			}
			tx := func(n int) []string { return slices.Concat(on(n, "MAIL", "RCPT"), on(n, mode.data...)) }
			wantCommands(t, srv, slices.Concat(on(1, "EHLO"), tx(1), on(2, "EHLO"), tx(2))...)
		})
	}
}
