package smtpcapture_test

import (
	"crypto/tls"
	"errors"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server/servertest"
)

const multipartMsg = "From: Acme <notify@acme.test>\r\n" +
	"To: Ann <ann@example.test>\r\n" +
	"Subject: =?UTF-8?q?Caf=C3=A9_news?=\r\n" +
	"Message-ID: <d1@acme.test>\r\n" +
	"MIME-Version: 1.0\r\n" +
	"Content-Type: multipart/alternative; boundary=b1\r\n" +
	"\r\n" +
	"--b1\r\n" +
	"Content-Type: text/plain; charset=UTF-8\r\n" +
	"Content-Transfer-Encoding: quoted-printable\r\n" +
	"\r\n" +
	"Caf=C3=A9 is open=\r\n" +
	" today\r\n" +
	"--b1\r\n" +
	"Content-Type: text/html; charset=UTF-8\r\n" +
	"Content-Transfer-Encoding: base64\r\n" +
	"\r\n" +
	"PHA+Q2Fmw6k8L3A+\r\n" +
	"--b1--\r\n"

// send is a minimal client on a fresh connection.
func send(t *testing.T, addr, from, to, msg string) error {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return sendOn(c, from, to, msg)
}

func sendOn(c *smtp.Client, from, to, msg string) error {
	if err := c.Mail(from); err != nil {
		_ = c.Reset()
		return err
	}
	if err := c.Rcpt(to); err != nil {
		_ = c.Reset()
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte(msg)); err != nil {
		return err
	}
	return w.Close()
}

func code(err error) int {
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

func TestRecordsAndParses(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t)
	if err := send(t, s.Addr(), "notify@acme.test", "ann@example.test", multipartMsg); err != nil {
		t.Fatal(err)
	}
	msgs := s.WaitFor(1, 5*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("got %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.ParseErr != nil {
		t.Fatal(m.ParseErr)
	}
	if m.From != "notify@acme.test" || len(m.To) != 1 || m.To[0] != "ann@example.test" {
		t.Errorf("envelope = %q %q", m.From, m.To)
	}
	if m.MessageID != "<d1@acme.test>" {
		t.Errorf("MessageID = %q", m.MessageID)
	}
	if m.Subject != "Café news" {
		t.Errorf("Subject = %q", m.Subject)
	}
	if m.ContentType != "multipart/alternative" {
		t.Errorf("ContentType = %q", m.ContentType)
	}
	if m.Text != "Café is open today" {
		t.Errorf("Text = %q", m.Text)
	}
	if m.HTML != "<p>Café</p>" {
		t.Errorf("HTML = %q", m.HTML)
	}
	if !strings.Contains(string(m.Data), "boundary=b1") {
		t.Errorf("raw data not kept")
	}
	if got := m.HeaderValue("To"); got != "Ann <ann@example.test>" {
		t.Errorf("To header = %q", got)
	}
}

func TestFailNextThenAccept(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t)
	s.FailNext(1, 451, "try later")
	s.FailNext(1, 550, "rejected")
	err := send(t, s.Addr(), "a@x.test", "b@x.test", "Subject: 1\r\n\r\nhi\r\n")
	if code(err) != 451 || !strings.Contains(err.Error(), "try later") {
		t.Fatalf("first send: %v, want 451 try later", err)
	}
	if err := send(t, s.Addr(), "a@x.test", "b@x.test", "Subject: 2\r\n\r\nhi\r\n"); code(err) != 550 {
		t.Fatalf("second send: %v, want 550", err)
	}
	if err := send(t, s.Addr(), "a@x.test", "b@x.test", "Subject: 3\r\n\r\nhi\r\n"); err != nil {
		t.Fatalf("third send: %v", err)
	}
	if msgs := s.Messages(); len(msgs) != 1 || msgs[0].Subject != "3" {
		t.Fatalf("recorded %+v, want only message 3", msgs)
	}
}

func TestFailRecipientAndNextRcpt(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t)
	s.FailRecipient("Bad@X.test", 550)
	s.FailNextRcpt(1, 452, "")
	if err := send(t, s.Addr(), "a@x.test", "bad@x.test", "\r\nhi\r\n"); code(err) != 550 {
		t.Fatalf("bad recipient: %v, want 550", err)
	}
	if err := send(t, s.Addr(), "a@x.test", "good@x.test", "\r\nhi\r\n"); code(err) != 452 {
		t.Fatalf("next rcpt: %v, want 452", err)
	}
	if err := send(t, s.Addr(), "a@x.test", "good@x.test", "\r\nhi\r\n"); err != nil {
		t.Fatalf("good recipient: %v", err)
	}
	s.FailRecipient("bad@x.test", 0)
	if err := send(t, s.Addr(), "a@x.test", "bad@x.test", "\r\nhi\r\n"); err != nil {
		t.Fatalf("cleared recipient: %v", err)
	}
	if s.Count() != 2 {
		t.Fatalf("Count = %d, want 2", s.Count())
	}
}

func TestHangNextStallsOneReply(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t)
	s.HangNext(1, time.Minute)

	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- sendOn(c, "a@x.test", "b@x.test", "\r\nslow\r\n") }()
	servertest.Eventually(t, 5*time.Second, "the server stalls its reply", func() bool { return s.Hanging() == 1 })
	// Another connection is answered while the first one hangs.
	if err := send(t, s.Addr(), "a@x.test", "b@x.test", "\r\nfast\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("stalled send returned early: %v", err)
	default:
	}
	// Down ends the stall; nothing is accepted from the stalled conversation.
	s.Down()
	if err := <-done; err == nil {
		t.Fatal("stalled send succeeded after Down")
	}
	if s.Count() != 1 {
		t.Fatalf("Count = %d, want 1", s.Count())
	}
}

func TestDownUpSamePort(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t)
	addr := s.Addr()
	s.Down()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("dial succeeded while down")
	}
	if err := s.Up(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, s.Addr())
	}
	if err := send(t, addr, "a@x.test", "b@x.test", "\r\nback\r\n"); err != nil {
		t.Fatal(err)
	}
}

func TestConnectionsCountsReuse(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t)
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 5 {
		if err := sendOn(c, "a@x.test", "b@x.test", "\r\nhi\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := send(t, s.Addr(), "a@x.test", "b@x.test", "\r\nhi\r\n"); err != nil {
		t.Fatal(err)
	}
	if got := s.Connections(); got != 2 {
		t.Fatalf("Connections = %d, want 2", got)
	}
	if got := len(s.WaitFor(6, time.Second)); got != 6 {
		t.Fatalf("got %d messages, want 6", got)
	}
}

func TestDiscardCountsOnly(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t, smtpcapture.WithDiscard())
	for range 3 {
		if err := send(t, s.Addr(), "a@x.test", "b@x.test", "\r\nhi\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	if msgs := s.WaitFor(3, time.Second); msgs != nil {
		t.Fatalf("discard mode kept %d messages", len(msgs))
	}
	if s.Count() != 3 {
		t.Fatalf("Count = %d, want 3", s.Count())
	}
}

func TestWaitForTimesOut(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t)
	start := time.Now()
	if msgs := s.WaitFor(1, 50*time.Millisecond); len(msgs) != 0 {
		t.Fatalf("got %d messages", len(msgs))
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("WaitFor returned before its timeout")
	}
}

func TestAuthAndSTARTTLS(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t, smtpcapture.WithAuth("u", "p"), smtpcapture.WithSTARTTLS())
	cfg := s.ClientTLSConfig()
	cfg.ServerName = "127.0.0.1"

	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("a@x.test"); code(err) != 502 {
		t.Fatalf("MAIL before AUTH: %v, want 502", err)
	}
	if err := c.Auth(smtp.PlainAuth("", "u", "wrong", "127.0.0.1")); code(err) != 535 {
		t.Fatalf("bad password: %v, want 535", err)
	}

	// net/smtp quits after a failed AUTH: a second connection does it right.
	c2, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.StartTLS(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c2.Auth(smtp.PlainAuth("", "u", "p", "127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := sendOn(c2, "a@x.test", "b@x.test", "\r\nsecret\r\n"); err != nil {
		t.Fatal(err)
	}
	if s.Connections() != 2 {
		t.Fatalf("Connections = %d, want 2 (STARTTLS is not a new connection)", s.Connections())
	}
}

func TestImplicitTLS(t *testing.T) {
	t.Parallel()
	s := smtpcapture.Start(t, smtpcapture.WithImplicitTLS())
	cfg := s.ClientTLSConfig()
	cfg.ServerName = "127.0.0.1"
	conn, err := tls.Dial("tcp", s.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := smtp.NewClient(conn, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := sendOn(c, "a@x.test", "b@x.test", "Subject: tls\r\n\r\nhi\r\n"); err != nil {
		t.Fatal(err)
	}
	if msgs := s.WaitFor(1, time.Second); len(msgs) != 1 || msgs[0].Subject != "tls" {
		t.Fatalf("got %+v", msgs)
	}
}
